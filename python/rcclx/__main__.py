"""Command line: ``python -m rcclx {env,run,info}`` (also installed as the ``rcclx`` command).

    eval "$(python -m rcclx env)"             # activate rcclx in this shell
    python -m rcclx run -- torchrun ... x.py  # run one command with rcclx active
    python -m rcclx info                      # paths and versions, as JSON
"""

import argparse
import json
import os
import shlex
import sys

from . import __version__, activation_env, library_path, stock_library


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


def _info(args):
    try:
        lib = library_path()
    except FileNotFoundError as e:
        lib = None
        print(f"rcclx: {e}", file=sys.stderr)
    info = {
        "version": __version__,
        "library": lib,
        "library_bytes": os.path.getsize(lib) if lib else None,
        "stock_library": stock_library(),
        "python": sys.executable,
        "env": activation_env() if lib else None,
    }
    print(json.dumps(info, indent=2))
    return 0 if lib else 1


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m rcclx",
        description="rcclx: drop-in NCCL/RCCL replacement. Activate the bundled librcclx.so "
                    "for a command or a shell.")
    parser.add_argument("--version", action="version", version=f"rcclx {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="{env,run,info}")
    sub.add_parser("env", help='print the export lines that activate rcclx: eval "$(python -m rcclx env)"')
    run = sub.add_parser("run", help="run a command with rcclx active: python -m rcclx run -- CMD...")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    sub.add_parser("info", help="library paths and versions, as JSON")
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return 2
    return {"env": _env, "run": _run, "info": _info}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
