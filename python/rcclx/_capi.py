"""ctypes view of rcclx's own C API (include/rcclx.h, generated from src/abi/own/).

Nothing here loads a library: every function takes a ``ctypes.CDLL`` handle that the caller
found (see ``rcclx._loaded``). Function pointers are fetched with ``handle["name"]`` (a fresh
object each time), so the argtypes set here never touch a handle the application owns.
"""

import ctypes
import json

ncclResult_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p

#: ncclResult_t values (nccl.h), for messages.
RESULT_NAMES = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}


class rcclxRouteStats(ctypes.Structure):
    """``typedef struct { uint64_t calls, bytes; } rcclxRouteStats;``"""

    _fields_ = [("calls", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


class rcclxCommStats(ctypes.Structure):
    """``rcclxCommStats``: per-algorithm sums and forwarded calls by reason."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "ddaLlCalls",
            "ddaLlBytes",
            "ddaFlatCalls",
            "ddaFlatBytes",
            "ddaTreeCalls",
            "ddaTreeBytes",
            "lowpCalls",
            "lowpBytes",
            "forwardedCalls",
            "forwardedBytes",
        )
    ] + [("forwardedByReason", ctypes.c_uint64 * 16)]


class CallError(RuntimeError):
    """An rcclx C function returned something other than ncclSuccess."""

    def __init__(self, function, result, detail=None):
        self.function = function
        self.result = result
        message = f"{function} returned {RESULT_NAMES.get(result, result)}"
        super().__init__(f"{message}: {detail}" if detail else message)


def _fn(handle, name, restype, argtypes):
    f = handle[name]
    f.restype = restype
    f.argtypes = argtypes
    return f


def _check(name, result):
    if result != 0:
        raise CallError(name, result)


def version_code(handle):
    """``rcclxGetVersion``: MAJOR*10000 + MINOR*100 + PATCH."""
    f = _fn(handle, "rcclxGetVersion", ncclResult_t, [ctypes.POINTER(ctypes.c_int)])
    v = ctypes.c_int(0)
    _check("rcclxGetVersion", f(ctypes.byref(v)))
    return v.value


def version_string(code):
    """100 -> '0.1.0'."""
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def upstream_path(handle):
    """``rcclxGetUpstreamPath``: the stock library rcclx forwards to, or None.

    This loads the stock library if rcclx has not done so yet."""
    f = _fn(handle, "rcclxGetUpstreamPath", ctypes.c_char_p, [])
    p = f()
    return p.decode(errors="replace") if p else None


def info(handle):
    """``rcclxGetInfo`` as a dict, or None (an rcclx without it, or text that is not a JSON
    object)."""
    try:
        text = _fn(handle, "rcclxGetInfo", ctypes.c_char_p, [])()
        value = json.loads(text.decode("utf-8", "replace")) if text else None
    except (AttributeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def device_fp8_format(handle, device):
    """``"e4m3fn"`` or ``"e4m3fnuz"``: the FP8 format of the codes rcclx's kernels write on GPU
    ``device``, as ``rcclxGetInfo``'s ``devices`` report it; None when it does not say (an older
    rcclx, no such device, or no rcclx kernels for it)."""
    for d in (info(handle) or {}).get("devices") or ():
        if isinstance(d, dict) and d.get("device") == device:
            fmt = d.get("fp8_format")
            return fmt if isinstance(fmt, str) else None
    return None


def _names(handle, function):
    f = _fn(handle, function, ctypes.c_char_p, [ctypes.c_int])
    names = []
    while True:
        n = f(len(names))
        if not n:
            return names
        names.append(n.decode(errors="replace"))


def route_names(handle):
    """``rcclxRouteName(0..)`` until NULL."""
    return _names(handle, "rcclxRouteName")


def forward_reason_names(handle):
    """``rcclxForwardReasonName(0..)`` until NULL."""
    return _names(handle, "rcclxForwardReasonName")


def _read_routes(f, name, prefix):
    count = ctypes.c_int(0)
    _check(name, f(*prefix, None, 0, ctypes.byref(count)))
    n = count.value
    arr = (rcclxRouteStats * max(n, 1))()
    _check(name, f(*prefix, arr, n, ctypes.byref(count)))
    return [(arr[i].calls, arr[i].bytes) for i in range(min(n, count.value))]


def process_routes(handle):
    """``rcclxGetProcessRouteStats``: [(calls, bytes)] in route index order."""
    f = _fn(
        handle,
        "rcclxGetProcessRouteStats",
        ncclResult_t,
        [ctypes.POINTER(rcclxRouteStats), ctypes.c_int, ctypes.POINTER(ctypes.c_int)],
    )
    return _read_routes(f, "rcclxGetProcessRouteStats", ())


def comm_routes(handle, comm):
    """``rcclxCommGetRouteStats(comm, ...)``: [(calls, bytes)] in route index order."""
    f = _fn(
        handle,
        "rcclxCommGetRouteStats",
        ncclResult_t,
        [ncclComm_t, ctypes.POINTER(rcclxRouteStats), ctypes.c_int, ctypes.POINTER(ctypes.c_int)],
    )
    return _read_routes(f, "rcclxCommGetRouteStats", (ncclComm_t(comm),))


def process_stats(handle):
    """``rcclxGetProcessStats``."""
    f = _fn(handle, "rcclxGetProcessStats", ncclResult_t, [ctypes.POINTER(rcclxCommStats)])
    s = rcclxCommStats()
    _check("rcclxGetProcessStats", f(ctypes.byref(s)))
    return s


def comm_stats(handle, comm):
    """``rcclxCommGetStats(comm, ...)``."""
    f = _fn(handle, "rcclxCommGetStats", ncclResult_t, [ncclComm_t, ctypes.POINTER(rcclxCommStats)])
    s = rcclxCommStats()
    _check("rcclxCommGetStats", f(ncclComm_t(comm), ctypes.byref(s)))
    return s


# --- GPU-resident AllToAllv (rcclxAllToAllvDynamic and its Split / Packed forms) -------------

size_t = ctypes.c_size_t
cudaStream_t = ctypes.c_void_p
ncclDataType_t = ctypes.c_int

#: ncclDataType_t values (nccl.h), by name.
DATATYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
    "float8e4m3": 10,
    "float8e5m2": 11,
}

#: What a dropped segment reads in ``actualRecvcounts`` (SIZE_MAX; -1 as int64).
COUNT_INVALID = (1 << 64) - 1

#: Per-peer: ``(sendbuffs, sendcounts, recvbuffs, maxSendcount, maxRecvcount, actualRecvcounts,
#: datatype, comm, stream)``; ``sendbuffs`` / ``recvbuffs`` are host arrays of device pointers.
ALLTOALLV_DYNAMIC_ARGTYPES = [
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    size_t,
    size_t,
    ctypes.c_void_p,
    ncclDataType_t,
    ncclComm_t,
    cudaStream_t,
]
#: Split: ``(sendbuff, sendSplitLengths, recvbuffs, maxSendcount, maxRecvcount,
#: actualRecvcounts, datatype, comm, stream)``.
ALLTOALLV_DYNAMIC_SPLIT_ARGTYPES = [
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    size_t,
    size_t,
    ctypes.c_void_p,
    ncclDataType_t,
    ncclComm_t,
    cudaStream_t,
]
#: Packed: ``(sendbuff, sendcounts, recvbuff, maxSendcount, maxRecvcount, actualRecvcounts,
#: countUnit, datatype, comm, stream)``.
ALLTOALLV_DYNAMIC_PACKED_ARGTYPES = [
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    size_t,
    size_t,
    ctypes.c_void_p,
    size_t,
    ncclDataType_t,
    ncclComm_t,
    cudaStream_t,
]


#: ``rcclxAllToAllvOptions.wire``: the plain copy, or the dispatch sent block-scaled (128
#: elements per scale) in the codecs of the low-precision collectives.
WIRE_PLAIN = 0
WIRE_FP8 = 1
WIRE_INT8 = 2
#: The Python names of the low-precision wires.
WIRES = {"fp8": WIRE_FP8, "int8": WIRE_INT8}


class rcclxAllToAllvOptions(ctypes.Structure):
    """``rcclxAllToAllvOptions``: the trailing argument of the ``...Ex`` forms.

    ``wire``: ``WIRE_*``; ``rowElements``: elements per row, where each row's blocks start (0: one
    count unit); ``recvScales``: NULL for decoded delivery, else a host array of scale buffers
    (one per peer for the per-peer and Split forms, one for Packed) for coded delivery (FP8)."""

    _fields_ = [
        ("wire", ctypes.c_int),
        ("rowElements", ctypes.c_size_t),
        ("recvScales", ctypes.POINTER(ctypes.c_void_p)),
    ]


ALLTOALLV_OPTIONS_P = ctypes.POINTER(rcclxAllToAllvOptions)

#: The AllToAllv forms, as src/abi/own/alltoallv.rs lists them: each plain form's argument types;
#: its ``Ex`` twin takes the same, then ``const rcclxAllToAllvOptions*`` (the plain form is the
#: ``Ex`` one with NULL options). python/tests/test_capi.py checks them against include/rcclx.h.
ALLTOALLV_FORMS = {
    "rcclxAllToAllvDynamic": ALLTOALLV_DYNAMIC_ARGTYPES,
    "rcclxAllToAllvDynamicSplit": ALLTOALLV_DYNAMIC_SPLIT_ARGTYPES,
    "rcclxAllToAllvDynamicPacked": ALLTOALLV_DYNAMIC_PACKED_ARGTYPES,
}


def alltoallv_fn(handle, form, options=False):
    """The AllToAllv export ``form`` (a key of ``ALLTOALLV_FORMS``), or its ``Ex`` twin with
    ``options``, declared (raises ``AttributeError`` on an rcclx without it)."""
    argtypes = ALLTOALLV_FORMS[form]
    if options:
        return _fn(handle, form + "Ex", ncclResult_t, argtypes + [ALLTOALLV_OPTIONS_P])
    return _fn(handle, form, ncclResult_t, argtypes)


def pointer_array(pointers):
    """A host array of device pointers (``void* const*``) from a list of ints."""
    return (ctypes.c_void_p * len(pointers))(*[p or None for p in pointers])


def comm_count_fn(handle):
    """``ncclCommCount(comm, int* count)``, declared (rcclx forwards it to the stock library)."""
    return _fn(handle, "ncclCommCount", ncclResult_t, [ncclComm_t, ctypes.POINTER(ctypes.c_int)])
