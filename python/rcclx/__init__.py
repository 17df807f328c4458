"""rcclx for Python: the bundled librcclx.so and one-line activation.

rcclx is a drop-in replacement for NCCL/RCCL (a C library, not a Python extension). This package
ships its ``librcclx.so`` and says how to put it in front of the stock library:

* ``python -m rcclx env`` prints the ``export`` lines (``eval "$(python -m rcclx env)"``);
* ``python -m rcclx run -- COMMAND...`` runs a command with them;
* ``rcclx.is_active()`` / ``rcclx.stats()`` tell, from inside a job, whether rcclx is loaded and
  which route (rcclx kernel or forwarded to the stock library) each collective took;
* ``rcclx.all_to_all_v_dynamic()`` is an all-to-all-v whose split sizes stay on the GPU (MoE
  dispatch and combine without a host round trip; capturable in a CUDA graph), optionally with
  the rows sent in FP8 or INT8 (``wire=``) and delivered decoded or as FP8 codes plus scales.

Importing this module loads no library and imports nothing heavy (no torch): only ``ctypes``.
"""

import ctypes
import os
import re
import sys

from . import _capi
from ._version import __version__

__all__ = [
    "__version__",
    "library_path",
    "stock_library",
    "activation_env",
    "is_active",
    "stats",
    "comm_handle",
    "all_to_all_v_dynamic",
]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_LIB_NAME = "librcclx.so"


def library_path():
    """Absolute path of the bundled ``librcclx.so``.

    From a source checkout without a built wheel (``PYTHONPATH=python``), cargo's
    ``target/release/librcclx.so`` (or under ``$CARGO_TARGET_DIR``) is used instead.
    Raises ``FileNotFoundError`` if there is neither."""
    bundled = os.path.join(_PKG_DIR, _LIB_NAME)
    if os.path.isfile(bundled):
        return bundled
    checkout = os.path.dirname(os.path.dirname(_PKG_DIR))
    if os.path.isfile(os.path.join(checkout, "Cargo.toml")):
        target = os.environ.get("CARGO_TARGET_DIR") or "target"
        dev = os.path.join(checkout, target, "release", _LIB_NAME)
        if os.path.isfile(dev):
            return os.path.abspath(dev)
    raise FileNotFoundError(
        f"{bundled} is missing: this rcclx package was not built with its library "
        "(install the wheel, or build it: see python/README.md)"
    )


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_rcclx_file(path):
    if os.path.basename(path).startswith("librcclx"):
        return True
    try:
        return _same_file(path, library_path())
    except FileNotFoundError:
        return False


def _norm(name):
    return re.sub(r"[-_.]+", "-", name or "").lower()


def _torch_nccl_requirement():
    """Name of the nvidia-nccl-cu* distribution torch requires (normalized), or None."""
    try:
        from importlib import metadata

        for req in metadata.requires("torch") or ():
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if m and _norm(m.group(1)).startswith("nvidia-nccl-cu"):
                return _norm(m.group(1))
    except Exception:  # torch not installed, or no metadata
        pass
    return None


def _nccl_wheel_candidates():
    """``nvidia/nccl/lib/libnccl.so.2`` of the installed ``nvidia-nccl-cu*`` distributions
    (the one torch requires first, then the newest CUDA major), then of ``sys.path``."""
    found = []
    try:
        from importlib import metadata

        for dist in metadata.distributions():
            name = _norm(dist.metadata["Name"])
            if name.startswith("nvidia-nccl-cu"):
                found.append((name, dist))
    except Exception:
        found = []
    preferred = _torch_nccl_requirement()

    def order(item):
        name = item[0]
        cu = re.search(r"cu(\d+)", name)
        return (name != preferred, -(int(cu.group(1)) if cu else 0))

    for _, dist in sorted(found, key=order):
        yield str(dist.locate_file(os.path.join("nvidia", "nccl", "lib", "libnccl.so.2")))
    for entry in sys.path:
        if entry:  # not the current directory
            yield os.path.join(entry, "nvidia", "nccl", "lib", "libnccl.so.2")


def _rccl_candidates():
    """``librccl.so.1`` in torch's lib directory (ROCm builds of PyTorch ship it), then ROCm."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")  # locates torch without importing it
        for loc in (spec.submodule_search_locations or ()) if spec else ():
            yield os.path.join(loc, "lib", "librccl.so.1")
    except Exception:
        pass
    rocm = os.environ.get("ROCM_PATH")
    if rocm:
        yield os.path.join(rocm, "lib", "librccl.so.1")
    yield "/opt/rocm/lib/librccl.so.1"


def stock_library():
    """The stock NCCL/RCCL library of the current Python environment, or None.

    ``nvidia/nccl/lib/libnccl.so.2`` of the installed ``nvidia-nccl-cu*`` package (what
    PyTorch's CUDA wheels load); else ``librccl.so.1`` from torch's lib directory or
    ``$ROCM_PATH/lib`` / ``/opt/rocm/lib``; else None (rcclx then searches at run time:
    README, "Troubleshooting"). A file that is rcclx itself is never returned."""
    for cand in list(_nccl_wheel_candidates()) + list(_rccl_candidates()):
        if os.path.isfile(cand) and not _is_rcclx_file(cand):
            return os.path.abspath(cand)
    return None


def activation_env(environ=None):
    """The variables that activate rcclx, in order: ``{name: value}``.

    * ``LD_PRELOAD``: librcclx.so first, then the entries already in ``environ`` (without it);
    * ``RCCLX_UPSTREAM_LIB``: ``environ``'s own value if it sets one, else ``stock_library()``
      (left out when there is none);
    * ``VLLM_NCCL_SO_PATH``, ``SGLANG_NCCL_SO_PATH``: librcclx.so. vLLM and SGLang load NCCL by
      path with ctypes for their CUDA-graph all-reduce, which ``LD_PRELOAD`` does not reach.
    """
    environ = os.environ if environ is None else environ
    lib = library_path()
    rest = [
        p
        for p in re.split(r"[:\s]+", environ.get("LD_PRELOAD", ""))
        if p and not (p == lib or _same_file(p, lib))
    ]
    env = {"LD_PRELOAD": ":".join([lib] + rest)}
    upstream = environ.get("RCCLX_UPSTREAM_LIB") or stock_library()
    if upstream:
        env["RCCLX_UPSTREAM_LIB"] = upstream
    env["VLLM_NCCL_SO_PATH"] = lib
    env["SGLANG_NCCL_SO_PATH"] = lib
    return env


# --- the rcclx loaded in this process -------------------------------------------------------


def _global_handle():
    """``ctypes.CDLL(None)`` if rcclx's marker symbol is in the global namespace (LD_PRELOAD,
    installed under the stock name, or dlopen'ed with RTLD_GLOBAL)."""
    try:
        handle = ctypes.CDLL(None)
        handle["rcclxGetVersion"]
        return handle
    except (OSError, AttributeError):
        return None


def _mapped_candidates():
    """Mapped files of this process that may be rcclx (by name: rcclx, or a stock name)."""
    seen = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(None, 5)
                if len(parts) < 6 or not parts[5].startswith("/") or parts[5].endswith(" (deleted)"):
                    continue
                path = parts[5]
                base = os.path.basename(path)
                if path not in seen and ("rcclx" in base or "nccl" in base or "rccl" in base):
                    seen.append(path)
    except OSError:
        pass
    # rcclx's own name first.
    return sorted(seen, key=lambda p: "rcclx" not in os.path.basename(p))


def _loaded(want_path=True):
    """``(handle, path)`` of the rcclx loaded in this process, or ``(None, None)``.

    The global namespace first; then every mapped library with a fitting name, opened with
    RTLD_NOLOAD (which never loads anything): this finds an rcclx loaded by path with ctypes
    (RTLD_LOCAL), as vLLM and SGLang do with VLLM_NCCL_SO_PATH / SGLANG_NCCL_SO_PATH."""
    glob = _global_handle()
    if glob is not None and not want_path:
        return glob, None
    for path in _mapped_candidates():
        try:
            handle = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            handle["rcclxGetVersion"]
        except (OSError, AttributeError):
            continue
        return handle, path
    return glob, None


def is_active():
    """True when librcclx.so is loaded in this process.

    Checks for rcclx's exported marker ``rcclxGetVersion`` in the global namespace
    (``ctypes.CDLL(None)``: LD_PRELOAD, stock-name install), then in the libraries mapped by
    name (an rcclx that vLLM/SGLang opened by path). Loads nothing."""
    return _loaded(want_path=False)[0] is not None


def comm_handle(group):
    """``(ncclComm_t as int, None)`` for ``group``, or ``(None, reason)``.

    ``group`` may be a ``torch.distributed`` ProcessGroup with the NCCL backend (its
    communicator on the current CUDA device:
    ``group._get_backend(torch.device("cuda"))._comm_ptr()``), an object with a ``comm``
    attribute holding an ``ncclComm_t`` (vLLM's / SGLang's ``PyNcclCommunicator``), an
    ``int`` address or a ``ctypes.c_void_p``. Never raises."""
    if isinstance(group, ctypes.c_void_p):
        group = group.value or 0
    if isinstance(group, int) and not isinstance(group, bool):
        return (group, None) if group else (None, "NULL communicator")
    inner = getattr(group, "comm", None)
    if isinstance(inner, (int, ctypes.c_void_p)) and not isinstance(inner, bool):
        return comm_handle(inner)
    torch = sys.modules.get("torch")  # a ProcessGroup means torch is imported; never import it
    if torch is None or not hasattr(group, "_get_backend"):
        return None, (
            f"unsupported group {type(group).__name__}: pass a torch.distributed ProcessGroup "
            "(NCCL backend), a PyNcclCommunicator, or an ncclComm_t address"
        )
    try:
        backend = group._get_backend(torch.device("cuda"))
    except Exception as e:
        return None, f"the group has no CUDA backend ({type(e).__name__}: {e})"
    getter = getattr(backend, "_comm_ptr", None)
    if getter is None:
        return None, (
            f"{type(backend).__name__} has no _comm_ptr(): not a ProcessGroupNCCL, "
            "or this PyTorch does not expose its communicator"
        )
    try:
        ptr = int(getter() if callable(getter) else getter)
    except Exception as e:
        return None, f"_comm_ptr() failed ({type(e).__name__}: {e})"
    if not ptr:
        return None, (
            "the group's NCCL communicator does not exist yet on the current CUDA device "
            "(PyTorch creates it at the group's first collective, or in "
            "init_process_group(device_id=...))"
        )
    return ptr, None


def _table(names, routes, by_reason, reason_names, all_routes):
    out = {}
    for i, (calls, nbytes) in enumerate(routes):
        if calls or all_routes:
            out[names[i] if i < len(names) else f"route{i}"] = {"calls": calls, "bytes": nbytes}
    if "forwarded" in out:
        out["forwarded"]["reasons"] = {
            name: by_reason[i]
            for i, name in enumerate(reason_names[: len(by_reason)])
            if by_reason[i] or all_routes
        }
    return out


def stats(group=None, all_routes=False):
    """Which route the collectives of this process took, as plain dicts.

    Returns::

        {"active": True,                       # rcclx is loaded in this process
         "library": "/.../librcclx.so",       # the loaded file (None if unknown)
         "version": "0.1.0",                  # rcclxGetVersion
         "upstream": "/.../libnccl.so.2",     # the stock library rcclx forwards to
         "process": {"allreduce.ll": {"calls": 12, "bytes": 4096},
                     "forwarded": {"calls": 3, "bytes": 96, "reasons": {"zero-count": 3}}},
         "comm": None}                        # same table for ``group`` when one is given

    Route names come from ``rcclxRouteName`` (``<collective>.<algorithm>``, e.g.
    ``allreduce.ll``, ``allreduce.flat``, ``allreduce.tree``, ``allreduce.lowp``, or
    ``forwarded``); the forwarded entry carries the calls by reason (``rcclxForwardReasonName``).
    "process" sums every communicator of the process, live and destroyed. Only routes with calls
    are listed unless ``all_routes`` is true. Bytes are the calls' message sizes.

    ``group``: see ``comm_handle`` (a torch ProcessGroup, a PyNcclCommunicator, or an
    ``ncclComm_t``). When its communicator cannot be read, "comm" is None and "comm_error" says
    why. Without rcclx loaded, "active" is False and "error" says so. Never raises for these.
    """
    handle, path = _loaded(want_path=True)
    result = {"active": handle is not None, "library": path, "version": None, "upstream": None,
              "process": {}, "comm": None}
    if handle is None:
        result["error"] = ("rcclx is not loaded in this process: start it with "
                           "`python -m rcclx run -- ...` or the lines of `python -m rcclx env`")
        if group is not None:
            result["comm_error"] = "rcclx is not loaded in this process"
        return result
    try:
        names = _capi.route_names(handle)
        reasons = _capi.forward_reason_names(handle)
        result["version"] = _capi.version_string(_capi.version_code(handle))
        result["upstream"] = _capi.upstream_path(handle)
        result["process"] = _table(names, _capi.process_routes(handle),
                                   list(_capi.process_stats(handle).forwardedByReason), reasons, all_routes)
    except (AttributeError, _capi.CallError) as e:  # an rcclx without the route API
        result["error"] = f"cannot read rcclx's statistics: {e}"
        if group is not None:
            result["comm_error"] = result["error"]
        return result
    if group is not None:
        comm, why = comm_handle(group)
        if comm is None:
            result["comm_error"] = why
        else:
            try:
                result["comm"] = _table(names, _capi.comm_routes(handle, comm),
                                        list(_capi.comm_stats(handle, comm).forwardedByReason),
                                        reasons, all_routes)
            except AttributeError as e:
                result["comm_error"] = f"cannot read rcclx's statistics: {e}"
            except _capi.CallError as e:
                result["comm_error"] = (
                    f"{e}: communicator {comm:#x} is not known to rcclx (created by another NCCL "
                    "library or before rcclx was loaded, or already destroyed)"
                )
    return result


# --- GPU-resident all-to-all-v ------------------------------------------------------------------

#: torch dtype names that differ from nccl.h's (``_capi.DATATYPES``). Any dtype without an
#: ncclDataType_t moves as bytes (uint8, a row counted in bytes): the call only copies.
_TORCH_TYPE_NAMES = {"float8_e4m3fn": "float8e4m3", "float8_e5m2": "float8e5m2"}

_A2AV = None  # (handle, rcclxAllToAllvDynamicPacked, ncclCommCount) once found


def _a2av_functions():
    """The declared C functions of the rcclx loaded in this process (cached: a loaded library
    stays loaded). RuntimeError when rcclx is not loaded or is too old."""
    global _A2AV
    if _A2AV is None:
        handle, _ = _loaded(want_path=False)
        if handle is None:
            raise RuntimeError(
                "rcclx is not loaded in this process: start the job with `python -m rcclx run -- ...` "
                "(or LD_PRELOAD=librcclx.so); all_to_all_v_dynamic needs rcclx's kernels"
            )
        try:
            packed = _capi.alltoallv_fn(handle, "rcclxAllToAllvDynamicPacked")
            count = _capi.comm_count_fn(handle)
        except AttributeError as e:
            raise RuntimeError(
                f"the rcclx loaded in this process has no rcclxAllToAllvDynamicPacked ({e}): "
                "it is older than this package"
            ) from None
        _A2AV = (handle, packed, count)
    return _A2AV


_A2AV_EX = None  # rcclxAllToAllvDynamicPackedEx once found


def _a2av_ex_function(wire):
    """``rcclxAllToAllvDynamicPackedEx`` of the rcclx loaded in this process (cached).
    RuntimeError naming it when that rcclx is older (the plain form needs only ``_a2av_functions``)."""
    global _A2AV_EX
    if _A2AV_EX is None:
        handle = _a2av_functions()[0]
        try:
            _A2AV_EX = _capi.alltoallv_fn(handle, "rcclxAllToAllvDynamicPacked", options=True)
        except AttributeError as e:
            raise RuntimeError(
                f"all_to_all_v_dynamic: wire={wire!r} needs rcclxAllToAllvDynamicPackedEx, which the rcclx "
                f"loaded in this process does not have ({e}): it is older than this package"
            ) from None
    return _A2AV_EX


_A2AV_TYPES = {}


def _a2av_datatype(dtype):
    """(ncclDataType_t, elements of ``dtype`` per count unit element): types without an NCCL
    datatype (bool, complex, ...) travel as bytes."""
    hit = _A2AV_TYPES.get(dtype)
    if hit is None:
        name = str(dtype).replace("torch.", "")
        datatype = _capi.DATATYPES.get(_TORCH_TYPE_NAMES.get(name, name))
        import torch

        hit = (datatype, 1) if datatype is not None else (_capi.DATATYPES["uint8"], torch.empty(0, dtype=dtype).element_size())
        _A2AV_TYPES[dtype] = hit
    return hit


def _current_raw_stream(torch, device):
    """The current CUDA stream of ``device`` as an integer (the cheap call when torch has it)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


# (id(group), device) -> (group, comm getter or None, comm, world). The group is held so that its
# id cannot be reused while cached; the getter re-reads the communicator on every call (cheap),
# so a communicator the group replaced is never used.
_A2AV_COMMS = {}


def _a2av_comm(group, device):
    """(ncclComm_t, world size) of ``group`` on ``device``, the expensive lookups done once."""
    key = (id(group), device)
    hit = _A2AV_COMMS.get(key)
    if hit is not None and hit[0] is group:
        getter, comm, world = hit[1], hit[2], hit[3]
        if getter is None:
            return comm, world
        try:
            now = int(getter())
        except Exception:
            now = 0
        if now == comm:
            return comm, world
    comm, why = comm_handle(group)
    if comm is None:
        raise RuntimeError(f"all_to_all_v_dynamic: no NCCL communicator for the group: {why}")
    _, _, count = _a2av_functions()
    nranks = ctypes.c_int(0)
    rc = count(_capi.ncclComm_t(comm), ctypes.byref(nranks))
    if rc != 0:
        raise _capi.CallError("ncclCommCount", rc, f"communicator {comm:#x}")
    getter = None
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(group, "_get_backend"):
        getter = getattr(group._get_backend(torch.device("cuda")), "_comm_ptr", None)
        if not callable(getter):
            getter = None
    _A2AV_COMMS[key] = (group, getter, comm, nranks.value)
    return comm, nranks.value


def _byte_range(t):
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def _overlap(a, b):
    (a0, a1), (b0, b1) = _byte_range(a), _byte_range(b)
    return a0 < a1 and b0 < b1 and a0 < b1 and b0 < a1


_RESULT_HINTS = {
    4: "an argument was rejected (the library logs why with NCCL_DEBUG=WARN)",
    5: "this communicator has no rcclx kernels: they need 2-8 ranks on one host with peer access, "
       "a communicator created while rcclx was loaded, not finalized or aborted",
}


#: Input dtypes of the low-precision wires (the codecs' I/O types).
_WIRE_INPUT_TYPES = ("float32", "float16", "bfloat16")
#: Output dtypes of coded delivery: the FP8 E4M3 codes, one byte per element.
_CODED_OUTPUT_TYPES = ("float8_e4m3fn", "float8_e4m3fnuz", "uint8")
#: Elements per block scale.
_BLOCK = 128

_FP8_FORMATS = {}  # CUDA device index -> "e4m3fn" / "e4m3fnuz" (a device's never changes)


def _fp8_format(device):
    """The FP8 format of the codes rcclx's kernels write on CUDA device ``device``: what the loaded
    rcclx reports for it (``rcclxGetInfo``'s ``devices``), else ``_codec_model.fp8_format`` (from
    the arch torch reports: ``"e4m3fnuz"`` on gfx942, ``"e4m3fn"`` on NVIDIA and gfx950)."""
    fmt = _FP8_FORMATS.get(device)
    if fmt is None:
        handle, _ = _loaded(want_path=False)
        fmt = _capi.device_fp8_format(handle, device) if handle is not None else None
        if fmt is None:
            from . import _codec_model

            fmt = _codec_model.fp8_format(device)
        _FP8_FORMATS[device] = fmt
    return fmt


def _check_fp8_output(dtype_name, fmt, device):
    """ValueError unless an output of torch dtype ``dtype_name`` holds the FP8 codes of format
    ``fmt`` as they are: ``float8_<fmt>``, or ``uint8`` (the raw codes)."""
    want = f"float8_{fmt}"
    if dtype_name not in (want, "uint8"):
        raise ValueError(
            f"all_to_all_v_dynamic: output is torch.{dtype_name}, but rcclx's kernels on cuda:{device} write "
            f"{fmt.upper()} codes (gfx942: E4M3FNUZ; NVIDIA and gfx950: E4M3FN), which read as "
            f"torch.{dtype_name} would be wrong values: pass a torch.{want} output (or torch.uint8 for the "
            "raw codes)"
        )


def all_to_all_v_dynamic(input, send_splits, output, group=None, recv_splits=None, wire=None,
                         output_scales=None):
    """All-to-all-v with the split sizes on the GPU: ``torch.distributed.all_to_all_single`` with
    ``input_split_sizes`` given as a device tensor and nothing read back to the host.

    * ``input``: contiguous CUDA tensor ``[N, *rest]``, rows packed by destination rank (the
      ``send_splits[0]`` rows for rank 0 first, then rank 1's, ...). ``N`` is its capacity.
    * ``send_splits``: int64 CUDA tensor ``[world]``, rows for each destination. Read by the
      kernel when it runs, so it may be written by an earlier kernel (the router) or between
      CUDA-graph replays.
    * ``output``: contiguous CUDA tensor ``[M, *rest]``, same dtype and ``rest`` (FP8 codes with
      ``output_scales``, below); receives the rows from rank 0, then rank 1, ... back to back.
      ``M`` is its capacity.
    * ``group``: a ``torch.distributed`` ProcessGroup (NCCL; None: the default group), or what
      ``comm_handle`` accepts.
    * ``recv_splits``: int64 CUDA tensor ``[world]`` to write the received row counts into
      (allocated with ``torch.empty`` if None; pass the same one to every CUDA-graph replay).
    * ``wire``: None (the rows are copied as they are), ``"fp8"`` or ``"int8"``: the rows
      travel block-scaled, in the codecs of rcclx's low-precision collectives (blocks of 128
      elements starting at each row's first element, the last one short when a row is not a
      multiple of 128; FP8 E4M3 with an f32 scale = amax / 448 per block (240 on gfx942's
      FNUZ), or INT8 with a bf16 scale and per-lane shifts). ``input`` must be float32, float16
      or bfloat16. Only the segments between different ranks are quantized: with decoded
      delivery a rank's own rows arrive exact. The error of a quantized element is the codec's
      (README, "FP8 or INT8"): FP8 about ``2^-4 |x|`` (relative per element), INT8 about
      ``amax / 254`` of its block (absolute). Decoded values are those of the CPU model of the
      codec, bit for bit (each block encoded, then code * scale in f32, rounded to ``output``'s
      dtype). Counted on the routes ``alltoallv.lowp`` (FP8) and ``alltoallv.int8``.
    * ``output_scales``: None for decoded delivery (``output`` gets the dequantized rows in
      ``input``'s dtype). A tensor for coded delivery (``wire="fp8"`` only), as FP8 expert
      GEMMs take it (DeepEP's layout): ``output`` then has dtype ``torch.float8_e4m3fn`` (the
      codes of NVIDIA GPUs and gfx950), ``torch.float8_e4m3fnuz`` (gfx942) or ``torch.uint8``;
      an FP8 dtype that is not the device's format is a ValueError (the format comes from
      ``rcclxGetInfo``'s ``devices``, else from the GPU's arch); shape ``[M, *rest]``, and gets the codes, one byte per element; ``output_scales`` is a
      contiguous float32 CUDA tensor ``[M, ceil(row / 128)]`` (``row`` = elements per row) and
      gets one scale per block: ``x = code * scale``. Every row is encoded, the rank's own
      rows too (locally: the codes and scales a peer would get).

    Returns ``recv_splits``: rows from each source rank, written on the device. A segment that
    would run past ``N`` on its sender or past ``M`` on its receiver is dropped, with every later
    one of that buffer, and reads -1; the other segments move normally (a dropped segment takes no
    room in ``output``). Nothing is written outside ``output[:M]``, ``output_scales[:M]`` and
    ``recv_splits``. For the MoE combine, pass the returned ``recv_splits`` as the next call's
    ``send_splits``: a -1 there sends nothing.

    Asynchronous on ``torch.cuda.current_stream()``: no host synchronisation, so it can be
    captured in ``torch.cuda.graph``. Calls ``rcclxAllToAllvDynamicPacked`` with one row as the
    count unit, or ``rcclxAllToAllvDynamicPackedEx`` with a wire (the rows as its
    ``rowElements``; RuntimeError naming it when the loaded rcclx is older). Needs rcclx loaded in
    the process (RuntimeError otherwise) and a communicator on which rcclx runs its own kernels
    (2-8 ranks on one host); a failed call raises RuntimeError naming the ncclResult_t. Invalid
    tensors raise ValueError. Not differentiable.
    """
    import torch

    def tensor(name, t):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"all_to_all_v_dynamic: {name} must be a torch.Tensor, not {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"all_to_all_v_dynamic: {name} must be a CUDA tensor (it is on {t.device})")
        if not t.is_contiguous():
            raise ValueError(f"all_to_all_v_dynamic: {name} must be contiguous")

    def type_name(dtype):
        return str(dtype).replace("torch.", "")

    if wire is not None and wire not in _capi.WIRES:
        raise ValueError(f"all_to_all_v_dynamic: wire must be None, 'fp8' or 'int8', not {wire!r}")
    coded = output_scales is not None
    if coded and wire != "fp8":
        raise ValueError(
            f"all_to_all_v_dynamic: output_scales (coded delivery) needs wire='fp8', not {wire!r}"
        )
    tensor("input", input)
    tensor("output", output)
    tensor("send_splits", send_splits)
    if coded:
        tensor("output_scales", output_scales)
    if input.dim() < 1 or output.dim() < 1:
        raise ValueError(
            f"all_to_all_v_dynamic: input and output need a row dimension (shapes {tuple(input.shape)} "
            f"and {tuple(output.shape)})"
        )
    if wire is not None and type_name(input.dtype) not in _WIRE_INPUT_TYPES:
        raise ValueError(
            f"all_to_all_v_dynamic: wire={wire!r} needs a float32, float16 or bfloat16 input, not {input.dtype}"
        )
    if coded:
        if type_name(output.dtype) not in _CODED_OUTPUT_TYPES:
            raise ValueError(
                f"all_to_all_v_dynamic: with output_scales (coded delivery) output holds the FP8 codes: "
                f"torch.float8_e4m3fn, torch.float8_e4m3fnuz or torch.uint8, not {output.dtype}"
            )
    elif input.dtype != output.dtype:
        raise ValueError(f"all_to_all_v_dynamic: input is {input.dtype} but output is {output.dtype}")
    if input.shape[1:] != output.shape[1:]:
        raise ValueError(
            f"all_to_all_v_dynamic: rows differ: input [N, *rest] is {tuple(input.shape)}, output "
            f"[M, *rest] is {tuple(output.shape)}; rest must be the same"
        )
    row = 1
    for d in input.shape[1:]:
        row *= d
    if row == 0:
        raise ValueError(f"all_to_all_v_dynamic: rows of zero elements (shape {tuple(input.shape)})")
    if coded:
        blocks = -(-row // _BLOCK)
        if output_scales.dtype != torch.float32 or tuple(output_scales.shape) != (output.shape[0], blocks):
            raise ValueError(
                f"all_to_all_v_dynamic: output_scales must be torch.float32 of shape ({output.shape[0]}, "
                f"{blocks}) (one scale per 128 elements of each output row), not {output_scales.dtype} "
                f"{tuple(output_scales.shape)}"
            )
    current = torch.cuda.current_device()
    named = [("input", input), ("output", output), ("send_splits", send_splits)]
    if coded:
        named.append(("output_scales", output_scales))
    for name, t in named:
        if t.get_device() != current:
            raise ValueError(
                f"all_to_all_v_dynamic: {name} is on {t.device} but the current CUDA device is "
                f"cuda:{current} (the call runs on its current stream, with the group's communicator "
                "of that device)"
            )
    if send_splits.dtype != torch.int64:
        raise ValueError(f"all_to_all_v_dynamic: send_splits must be torch.int64, not {send_splits.dtype}")
    if coded and type_name(output.dtype) != "uint8":
        _check_fp8_output(type_name(output.dtype), _fp8_format(current), current)
    if _overlap(input, output):
        raise ValueError("all_to_all_v_dynamic: input and output overlap")
    if _overlap(send_splits, output):
        raise ValueError("all_to_all_v_dynamic: send_splits and output overlap")
    if coded:
        for name, t in (("input", input), ("output", output), ("send_splits", send_splits)):
            if _overlap(output_scales, t):
                raise ValueError(f"all_to_all_v_dynamic: output_scales and {name} overlap")

    if group is None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "all_to_all_v_dynamic: torch.distributed is not initialized (group=None means the "
                "default process group)"
            )
        group = dist.group.WORLD
    comm, world = _a2av_comm(group, current)

    if tuple(send_splits.shape) != (world,):
        raise ValueError(
            f"all_to_all_v_dynamic: send_splits must have shape ({world},) (one count per rank), "
            f"not {tuple(send_splits.shape)}"
        )
    if recv_splits is None:
        recv_splits = torch.empty(world, dtype=torch.int64, device=input.device)
    else:
        tensor("recv_splits", recv_splits)
        if recv_splits.dtype != torch.int64 or tuple(recv_splits.shape) != (world,):
            raise ValueError(
                f"all_to_all_v_dynamic: recv_splits must be torch.int64 of shape ({world},), not "
                f"{recv_splits.dtype} {tuple(recv_splits.shape)}"
            )
        if recv_splits.get_device() != current:
            raise ValueError(
                f"all_to_all_v_dynamic: recv_splits is on {recv_splits.device} but the current CUDA "
                f"device is cuda:{current}"
            )
        others = [("send_splits", send_splits), ("input", input), ("output", output)]
        if coded:
            others.append(("output_scales", output_scales))
        for name, t in others:
            if _overlap(recv_splits, t):
                raise ValueError(f"all_to_all_v_dynamic: recv_splits and {name} overlap")

    datatype, unit = _a2av_datatype(input.dtype)
    unit *= row
    args = (
        input.data_ptr(),
        send_splits.data_ptr(),
        output.data_ptr(),
        input.shape[0],
        output.shape[0],
        recv_splits.data_ptr(),
        unit,
        datatype,
        comm,
        _current_raw_stream(torch, current),
    )
    if wire is None:
        rc = _a2av_functions()[1](*args)
        name = "rcclxAllToAllvDynamicPacked"
    else:
        # The Packed form reads recvScales[0]; `keep` holds that host array through the call.
        options, keep = _capi.alltoallv_options(
            _capi.WIRES[wire], row, [output_scales.data_ptr()] if coded else None
        )
        rc = _a2av_ex_function(wire)(*args, ctypes.byref(options))
        del keep
        name = "rcclxAllToAllvDynamicPackedEx"
    if rc != 0:
        raise _capi.CallError(name, rc, _RESULT_HINTS.get(rc))
    return recv_splits
