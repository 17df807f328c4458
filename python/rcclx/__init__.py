"""rcclx for Python: the bundled librcclx.so and one-line activation.

rcclx is a drop-in replacement for NCCL/RCCL (a C library, not a Python extension). This package
ships its ``librcclx.so`` and says how to put it in front of the stock library:

* ``python -m rcclx env`` prints the ``export`` lines (``eval "$(python -m rcclx env)"``);
* ``python -m rcclx run -- COMMAND...`` runs a command with them;
* ``rcclx.is_active()`` / ``rcclx.stats()`` tell, from inside a job, whether rcclx is loaded and
  which route (rcclx kernel or forwarded to the stock library) each collective took.

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
    README, "Finding the stock library"). A file that is rcclx itself is never returned."""
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
