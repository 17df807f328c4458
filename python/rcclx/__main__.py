"""Command line: ``python -m rcclx {env,run,info,tune}`` (also installed as the ``rcclx`` command).

    eval "$(python -m rcclx env)"             # activate rcclx in this shell
    python -m rcclx run -- torchrun ... x.py  # run one command with rcclx active
    python -m rcclx info                      # version, commit, GPU targets, stock library, settings,
                                              # the tuning file in use (JSON)
    python -m rcclx tune                      # measure this node, write the tuning file (tune.py)
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

from . import __version__, activation_env, library_path, stock_library, tune


def _upstream_warning(env):
    """A warning (str) when the stock library that ``env`` names does not exist, else None."""
    path = env.get("RCCLX_UPSTREAM_LIB")
    if path and not os.path.exists(path):
        source = "RCCLX_UPSTREAM_LIB" if os.environ.get("RCCLX_UPSTREAM_LIB") else "the stock library found"
        return (f"rcclx: warning: {source} names {path}, which does not exist: rcclx will fail to load "
                "the stock library and every NCCL call will return ncclSystemError (set "
                "RCCLX_UPSTREAM_LIB to an existing libnccl.so.2 / librccl.so.1, or unset it to let "
                "rcclx search)")
    return None


def _env(args):
    try:
        env = activation_env()
    except FileNotFoundError as e:
        print(f"rcclx: {e}", file=sys.stderr)
        return 1
    if "RCCLX_UPSTREAM_LIB" not in env:
        # On stderr: a comment on stdout would swallow the lines after it in `eval $(...)`.
        print("# rcclx: no stock NCCL/RCCL library found in this Python environment; rcclx will "
              "search for one at run time (set RCCLX_UPSTREAM_LIB to choose it)", file=sys.stderr)
    warning = _upstream_warning(env)
    if warning:
        print(warning, file=sys.stderr)
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def _run(args):
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("usage: python -m rcclx run -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        env = dict(os.environ)
        env.update(activation_env())
    except FileNotFoundError as e:
        print(f"rcclx: {e}", file=sys.stderr)
        return 1
    warning = _upstream_warning(env)
    if warning:
        print(warning, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(cmd[0], cmd, env)  # replaces this process: the exit status is the command's
    except FileNotFoundError:
        print(f"rcclx run: command not found: {cmd[0]}", file=sys.stderr)
        return 127
    except PermissionError as e:
        print(f"rcclx run: cannot execute {cmd[0]}: {e}", file=sys.stderr)
        return 126
    except OSError as e:
        print(f"rcclx run: cannot execute {cmd[0]}: {e}", file=sys.stderr)
        return 126


# Run in a child process by `info`: loads librcclx.so by path (as vLLM does) and prints what
# rcclxGetInfo returns. A child, so that a library that fails to load, crashes or hangs leaves
# `info` able to report what it knows.
_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
f = lib.rcclxGetInfo
f.restype = ctypes.c_char_p
text = f()
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write(text.decode("utf-8", "replace") if text else "")
"""


def _library_info(lib, upstream):
    """``(rcclxGetInfo's JSON as a dict, None)`` or ``(None, why)``: ``lib`` loaded in a child
    process with ``RCCLX_UPSTREAM_LIB=upstream`` (when not None)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if upstream:
        env["RCCLX_UPSTREAM_LIB"] = upstream
    # The JSON comes back in a file: stdout carries the libraries' log lines (NCCL_DEBUG).
    fd, out_path = tempfile.mkstemp(prefix="rcclx-info-", suffix=".json")
    os.close(fd)
    try:
        try:
            p = subprocess.run([sys.executable, "-c", _PROBE, lib, out_path], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"loading {lib} failed: {e}"
        with open(out_path, "rb") as f:
            json_bytes = f.read()
    finally:
        os.unlink(out_path)
    logged = p.stdout.decode("utf-8", "replace").strip()
    err = p.stderr.decode("utf-8", "replace").strip()
    for text in (logged, err):
        if text:
            sys.stderr.write(text + "\n")  # the libraries' log lines (NCCL_DEBUG) and Python's errors
    if p.returncode != 0:
        how = f"signal {-p.returncode}" if p.returncode < 0 else f"exit status {p.returncode}"
        last = err.splitlines()[-1] if err else ""
        return None, f"loading {lib} and calling rcclxGetInfo failed ({how}){': ' + last if last else ''}"
    try:
        info = json.loads(json_bytes.decode("utf-8", "replace"))
    except ValueError as e:
        return None, f"rcclxGetInfo of {lib} returned no JSON object ({e})"
    if not isinstance(info, dict):
        return None, f"rcclxGetInfo of {lib} returned no JSON object"
    return info, None


def _info(args):
    """Prints, as JSON, what the package knows (version, paths, the activation variables) merged
    with what the library says about itself (``rcclxGetInfo``: commit, GPU targets, the stock
    library it loads and its version, the settings in effect). Exit status 1 when the library is
    missing or cannot be loaded, or when it cannot load the stock library (every NCCL call of a job
    would fail): what is known is still printed."""
    try:
        lib = library_path()
    except FileNotFoundError as e:
        lib = None
        print(f"rcclx: {e}", file=sys.stderr)
    env = activation_env() if lib else None
    # The stock library a job started with `python -m rcclx run` would use: RCCLX_UPSTREAM_LIB when
    # set, else the one of this Python environment (None: rcclx searches at run time).
    upstream = os.environ.get("RCCLX_UPSTREAM_LIB") or stock_library()
    warning = _upstream_warning({"RCCLX_UPSTREAM_LIB": upstream} if upstream else {})
    if warning:
        print(warning, file=sys.stderr)
    loaded, why = _library_info(lib, upstream) if lib else (None, "librcclx.so not found")
    if loaded is None:
        print(f"rcclx: {why}", file=sys.stderr)

    stock = {"path": upstream}
    if loaded is not None and isinstance(loaded.get("stock_library"), dict):
        stock.update(loaded["stock_library"])  # path and version, or error, as the library loaded it
    elif upstream is None:
        stock["error"] = "none found in this Python environment; rcclx searches at run time"
    if upstream and not os.path.exists(upstream):
        stock.setdefault("error", f"{upstream} does not exist")

    info = {
        "version": __version__,
        "commit": None,
        "library": lib,
        "library_bytes": os.path.getsize(lib) if lib else None,
        "library_loaded": loaded is not None,
        "gpu_targets": None,
        "stock_library": stock,
        "disabled": None,
        "python": sys.executable,
        "env": env,
        "settings": None,
        # What the library found (rcclxGetInfo's tuning_file); without the library, where it looks.
        "tuning_file": {"path": tune.default_path()} if tune.default_path() else None,
    }
    if loaded is None:
        info["error"] = why
    else:
        for key, value in loaded.items():
            if key == "version":
                if value != __version__:
                    info["library_version"] = value
                    print(f"rcclx: warning: the library is version {value}, the package {__version__}",
                          file=sys.stderr)
            elif key != "stock_library":
                info[key] = value
    print(json.dumps(info, indent=2))
    if loaded is None:
        return 1
    if "version" not in stock:
        print(f"rcclx: the stock library did not load: {stock.get('error', 'unknown error')}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m rcclx",
        description="rcclx: drop-in NCCL/RCCL replacement. Activate the bundled librcclx.so "
                    "for a command or a shell.")
    parser.add_argument("--version", action="version", version=f"rcclx {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="{env,run,info,tune}")
    sub.add_parser("env", help='print the export lines that activate rcclx: eval "$(python -m rcclx env)"')
    run = sub.add_parser("run", help="run a command with rcclx active: python -m rcclx run -- CMD...")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    sub.add_parser("info", help="version, commit, GPU targets, the stock library (path, version), the "
                   "settings in effect and the tuning file in use, as JSON (loads the library)")
    tune.add_parser(sub)
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return 2
    return {"env": _env, "run": _run, "info": _info, "tune": _tune}[args.cmd](args)


def _tune(args):
    def library_info():
        lib = library_path()  # FileNotFoundError: reported below
        stock = os.environ.get("RCCLX_UPSTREAM_LIB") or stock_library()
        info, why = _library_info(lib, stock)
        if info is None:
            raise RuntimeError(why)
        return info, lib, (info.get("stock_library") or {}).get("path") or stock

    def guarded():
        try:
            return library_info()
        except FileNotFoundError as e:
            raise RuntimeError(str(e)) from e

    return tune.main(args, __version__, guarded)


if __name__ == "__main__":
    sys.exit(main())
