"""``python -m rcclx tune``: measure rcclx against the stock library on this node and write the
tuning file rcclx reads (``src/tuning.rs``).

The benchmark is rccl-tests-compat (CUDA only): the wheel built by ``ci/wheel.sh`` carries it
(``rcclx/bin/rcclx_perf``, built for any manylinux_2_28 machine by
``rccl-tests-compat/portable.sh``); in a source tree ``rccl-tests-compat/build.sh`` builds it. For
every collective rcclx intercepts, ``<coll>_perf --libs stock=...,rcclx=...`` runs both libraries
side by side in one process group, eagerly and in a CUDA graph, 1 KiB - 256 MiB in steps of 2x,
over the node's GPUs (one process each). While measuring, rcclx's DDA limits are raised to the
largest size (its ``*_MAX_BYTES`` variables), so its kernels run at every size, and no tuning
file is read.

Selection, per collective: at each size and mode (eager, graph), the median over every sample
(types, out of place and in place, cycles) of stock time / rcclx time. rcclx is faster at a size
when that median is at least ``1 + margin`` in every mode measured there. The DDA limit is the
largest size up to which rcclx is faster at every size; above it the stock library runs. The
limit cannot take the smallest sizes from rcclx: a message of at most ``RCCLX_DDA_LL_MAX_BYTES``
per rank runs rcclx's LL kernel whatever the limit (the printed table shows each size's
ratios). The same selection reads JSON files of earlier runs (``--from``), with no GPU.

The file: ``RCCLX_TUNING_FILE``, else ``$XDG_CONFIG_HOME/rcclx/tuning.toml``, else
``~/.config/rcclx/tuning.toml``. It holds one entry per GPU name and rank count (``[[measured]]``):
a run replaces the entry of its own and keeps the others (a file another rcclx version wrote, or
one it cannot read, is replaced whole). A communicator takes the entry of its GPU and rank count
(rcclx logs which at INFO) and ignores the file, with a warning, where it has none, or when
another rcclx version wrote it. Variables that set a limit win over the file.
"""

import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# rcclx's collectives (``collective::COLLS``): the tuning file's section name, rccl-tests-compat's
# program name, and the variable of the DDA limit (``Spec::max_var``).
COLLECTIVES = [
    ("allreduce", "all_reduce", "RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES"),
    ("allgather", "all_gather", "RCCL_DDA_ALL_GATHER_MAX_BYTES"),
    ("reducescatter", "reduce_scatter", "RCCL_DDA_REDUCE_SCATTER_MAX_BYTES"),
    ("alltoall", "alltoall", "RCCL_DDA_ALL_TO_ALL_MAX_BYTES"),
    ("broadcast", "broadcast", "RCCL_DDA_BROADCAST_MAX_BYTES"),
]
BY_PROGRAM = {program: name for name, program, _ in COLLECTIVES}
MIN_BYTES = 1 << 10
MAX_BYTES = 256 << 20
DEFAULT_MARGIN = 0.05
MAX_RANKS = 8
LAYOUTS = ("out_of_place", "in_place")


def default_path(environ=None):
    """Where rcclx looks for the tuning file (``tuning::path``), or None when
    ``RCCLX_TUNING_FILE`` is empty or there is no home directory."""
    environ = os.environ if environ is None else environ
    if "RCCLX_TUNING_FILE" in environ:
        return environ["RCCLX_TUNING_FILE"] or None
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "rcclx", "tuning.toml")
    home = environ.get("HOME")
    return os.path.join(home, ".config", "rcclx", "tuning.toml") if home else None


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024


class Run:
    """One benchmark JSON file: its collective, mode, rank count, GPU, and per size the ratios
    stock time / rcclx time of every sample."""

    def __init__(self, path):
        with open(path) as f:
            d = json.load(f)
        cfg = d["config"]
        self.path = path
        self.collective = BY_PROGRAM.get(cfg["collective"])
        self.mode = "graph" if int(cfg.get("graph") or 0) > 0 else "eager"
        self.nranks = int(cfg["nranks"])
        names = {dev.get("device_info") for dev in cfg.get("devices", [])}
        self.gpu = names.pop() if len(names) == 1 else None
        self.ratios = {}
        for r in d["results"]:
            per = r["per_library"]
            other = [lib for lib in per if lib != "stock"]
            if "stock" not in per or len(other) != 1:
                raise ValueError(f"{path}: each row needs stock and one other library, has {list(per)}")
            for lay in LAYOUTS:
                s, x = per["stock"][lay]["time"], per[other[0]][lay]["time"]
                if s > 0 and x > 0:
                    self.ratios.setdefault(int(r["size"]), []).append(s / x)


def select(runs, margin=DEFAULT_MARGIN):
    """Runs of one collective -> ``(limit, rows)``: ``limit`` is the largest measured size up to
    which rcclx is faster at every size (0: not even at the smallest; None: no sizes), ``rows``
    per size ``(size, {mode: median ratio}, faster)``."""
    by_size = {}
    for run in runs:
        for size, ratios in run.ratios.items():
            by_size.setdefault(size, {}).setdefault(run.mode, []).extend(ratios)
    rows, limit, winning = [], None, True
    for size in sorted(by_size):
        medians = {mode: statistics.median(v) for mode, v in sorted(by_size[size].items())}
        faster = all(m >= 1 + margin for m in medians.values())
        rows.append((size, medians, faster))
        if limit is None:
            limit = 0
        if winning and faster:
            limit = size
        winning = winning and faster
    return limit, rows


def choose(runs, margin=DEFAULT_MARGIN):
    """Every run (of any collective) -> ``(gpu, nranks, {collective: limit}, {collective: rows})``.
    All runs must share one GPU name and rank count."""
    gpus = {r.gpu for r in runs}
    ranks = {r.nranks for r in runs}
    if len(gpus) != 1 or None in gpus:
        raise ValueError(f"the runs are not of one GPU model: {sorted(map(str, gpus))}")
    if len(ranks) != 1:
        raise ValueError(f"the runs are not of one rank count: {sorted(ranks)}")
    limits, tables = {}, {}
    for name, _, _ in COLLECTIVES:
        mine = [r for r in runs if r.collective == name]
        if mine:
            limit, rows = select(mine, margin)
            if limit is not None:
                limits[name], tables[name] = limit, rows
    return gpus.pop(), ranks.pop(), limits, tables


def render(entries, version, comment=""):
    """The tuning file's text (the TOML subset ``tuning::parse`` reads): ``entries`` is a list of
    ``(gpu, nranks, {collective: limit})``, one ``[[measured]]`` table each."""
    for text in [version] + [gpu for gpu, _, _ in entries]:
        if '"' in text or "\\" in text or "\n" in text:
            raise ValueError(f"cannot write {text!r} in the tuning file")
    lines = [f"# {line}" for line in comment.splitlines()]
    lines.append(f'rcclx_version = "{version}"')
    for gpu, nranks, limits in entries:
        lines += ["", "[[measured]]", f'gpu = "{gpu}"', f"nranks = {nranks}"]
        for name, _, _ in COLLECTIVES:
            if name in limits:
                lines.append(f"{name} = {int(limits[name])}  # {human(int(limits[name]))}")
    return "\n".join(lines) + "\n"


def _strip_comment(line):
    """``line`` without a ``# comment`` outside a string."""
    quoted = False
    for i, c in enumerate(line):
        if c == '"':
            quoted = not quoted
        elif c == "#" and not quoted:
            return line[:i].strip()
    return line.strip()


def read_entries(path, version):
    """The entries of the tuning file at ``path`` as ``render`` takes them, if this rcclx
    ``version`` wrote it in the format it reads; ``None`` (the file is replaced) otherwise."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    names = {name for name, _, _ in COLLECTIVES}
    entries, wrote = [], None
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if not line:
            continue
        if line == "[[measured]]":
            entries.append(["", 0, {}])
            continue
        key, sep, value = (part.strip() for part in line.partition("="))
        quoted = len(value) >= 2 and value[0] == value[-1] == '"'
        number = value.replace("_", "")
        if not sep:
            return None
        if key == "rcclx_version" and not entries and quoted:
            wrote = value[1:-1]
        elif entries and key == "gpu" and quoted:
            entries[-1][0] = value[1:-1]
        elif entries and key in names | {"nranks"} and number.isdigit():
            if key == "nranks":
                entries[-1][1] = int(number)
            else:
                entries[-1][2][key] = int(number)
        else:
            return None
    if wrote != version or not all(gpu and n for gpu, n, _ in entries):
        return None
    return [tuple(e) for e in entries]


def table(tables, limits, margin):
    lines = []
    for name, rows in tables.items():
        lines.append(f"{name}: DDA up to {human(limits[name])} (stock time / rcclx time, median; rcclx "
                     f"faster by {margin:.0%} or more at every size up to there, eager and graph)")
        for size, medians, faster in rows:
            cells = "  ".join(f"{mode} {m:5.2f}" for mode, m in medians.items())
            lines.append(f"  {human(size):>9}  {cells}  {'faster' if faster else 'not faster'}")
    return "\n".join(lines)


# The benchmark in the wheel (``rccl-tests-compat/portable.sh``; ``python/setup.py``): one program
# for every collective, chosen with --coll.
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "rcclx_perf")


def find_bench(given=None, tree=None):
    """The benchmark: ``(where, command)``, ``command(program)`` the first arguments of the run of
    ``<program>_perf`` (``all_reduce``, ...); or None. ``given`` (--bench-dir), else the build in
    the source tree ``tree`` (default: the one this package lies in, if any:
    rccl-tests-compat/build, .carry/bench), else the program in the wheel."""
    if tree is None:
        tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    folders = [given] if given else [os.path.join(tree, "rccl-tests-compat", "build"),
                                     os.path.join(tree, ".carry", "bench")]
    for d in folders:
        if d and os.path.isfile(os.path.join(d, "all_reduce_perf")):
            return d, lambda program, d=d: [os.path.join(d, f"{program}_perf")]
    if not given and os.access(BUNDLED, os.X_OK):
        return BUNDLED, lambda program: [BUNDLED, "--coll", program]
    return None


def measure(bench, stock, lib, nranks, workdir, dtypes, cycles, log=print):
    """Runs every collective eager and in a graph with ``bench`` (``find_bench``'s command);
    returns the JSON paths."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["RCCLX_UPSTREAM_LIB"] = stock
    env["RCCLX_TUNING_FILE"] = ""  # measure rcclx's kernels, not an earlier file's choices
    for _, _, var in COLLECTIVES:
        env[var] = str(MAX_BYTES)
    paths = []
    for name, program, _ in COLLECTIVES:
        for mode in ("eager", "graph"):
            for dt in dtypes:
                out = os.path.join(workdir, f"{name}-{mode}-{dt}.json")
                cmd = bench(program) + ["--libs", f"stock={stock},rcclx={lib}",
                       "-P", str(nranks), "-g", "1", "-b", str(MIN_BYTES), "-e", str(MAX_BYTES), "-f", "2",
                       "-n", "20", "-w", "5", "-c", "0", "-N", str(cycles), "-d", dt, "-J", out]
                if mode == "graph":
                    cmd += ["-G", "20"]
                log(f"rcclx tune: {name} {mode} {dt} ({nranks} ranks)")
                t0 = time.time()
                p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
                if p.returncode != 0 or not os.path.exists(out):
                    tail = p.stdout.decode("utf-8", "replace").strip().splitlines()[-15:]
                    raise RuntimeError(f"{' '.join(cmd)} failed (exit {p.returncode}):\n" + "\n".join(tail))
                log(f"  {time.time() - t0:.0f} s")
                paths.append(out)
    return paths


def gpus(info):
    """The visible GPUs rcclx's GPU runtime sees (``rcclxGetInfo``'s ``devices``), or why none."""
    devices = [d for d in (info or {}).get("devices") or [] if "error" not in d]
    why = ((info or {}).get("gpu_runtime") or {}).get("error")
    return len(devices), why


def main(args, version, library_info):
    """``python -m rcclx tune``; ``library_info()`` returns ``(rcclxGetInfo dict, lib, stock)``
    or raises RuntimeError."""
    out_path = args.out or default_path()
    if not out_path:
        print("rcclx tune: no place for the tuning file (RCCLX_TUNING_FILE is empty and HOME is unset); "
              "give one with --out", file=sys.stderr)
        return 2
    if args.inputs:
        paths = []
        for p in args.inputs:
            paths += sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
        runs = [Run(p) for p in paths]
        runs = [r for r in runs if r.collective]
        if not runs:
            print("rcclx tune: no benchmark JSON files in " + " ".join(args.inputs), file=sys.stderr)
            return 2
        source = "from " + ", ".join(args.inputs)
    else:
        try:
            info, lib, stock = library_info()
        except RuntimeError as e:
            print(f"rcclx tune: {e}", file=sys.stderr)
            return 1
        # The file must carry the version of the library that reads it.
        version = info.get("version") or version
        count, why = gpus(info)
        if count < 2:
            print(f"rcclx tune: this node has {count} visible GPU{'s' if count != 1 else ''}"
                  f"{f' ({why})' if why else ''}; tuning measures collectives between GPUs and needs at "
                  "least 2 (rcclx's kernels serve 2-8 GPUs of one host). Nothing was measured or written.",
                  file=sys.stderr)
            return 1
        nranks = min(args.nranks or count, count, MAX_RANKS)
        found = find_bench(args.bench_dir)
        if found is None:
            print("rcclx tune: the benchmark (rccl-tests-compat's all_reduce_perf and friends) was not found"
                  f"{' in ' + args.bench_dir if args.bench_dir else ''}; this rcclx package has none (a wheel "
                  "built by ci/wheel.sh has it): build it with `bash rccl-tests-compat/build.sh` in rcclx's "
                  "source tree and pass --bench-dir rccl-tests-compat/build", file=sys.stderr)
            return 1
        where, bench = found
        if not stock:
            print("rcclx tune: no stock NCCL library found; set RCCLX_UPSTREAM_LIB", file=sys.stderr)
            return 1
        workdir = args.keep or tempfile.mkdtemp(prefix="rcclx-tune-")
        os.makedirs(workdir, exist_ok=True)
        try:
            paths = measure(bench, stock, lib, nranks, workdir, args.dtypes.split(","), args.cycles,
                            log=lambda s: print(s, file=sys.stderr))
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            print(f"rcclx tune: the benchmark failed: {e}", file=sys.stderr)
            return 1
        runs = [Run(p) for p in paths]
        source = f"measured with {where} ({nranks} ranks; JSON in {workdir})"
    try:
        gpu, nranks, limits, tables = choose(runs, args.margin)
    except ValueError as e:
        print(f"rcclx tune: {e}", file=sys.stderr)
        return 2
    print(table(tables, limits, args.margin), file=sys.stderr)
    comment = (f"Written by `python -m rcclx tune` {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {source}.\n"
               f"DDA limits: rcclx's kernels up to max_bytes, the stock library above (margin {args.margin:g}).")
    # This run's entry replaces the one of its GPU and rank count; the file keeps the others.
    kept = [e for e in read_entries(out_path, version) or [] if (e[0], e[1]) != (gpu, nranks)]
    entries = sorted(kept + [(gpu, nranks, limits)], key=lambda e: (e[0], e[1]))
    text = render(entries, version, comment)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out_path)
    others = "".join(f"; kept {g} at {n} ranks" for g, n, _ in kept)
    print(f"rcclx tune: wrote {out_path} ({gpu}, {nranks} ranks, rcclx {version}{others})", file=sys.stderr)
    if args.out and args.out != default_path():
        print(f"rcclx tune: rcclx reads it with RCCLX_TUNING_FILE={out_path}", file=sys.stderr)
    return 0


def add_parser(sub):
    p = sub.add_parser("tune", help="measure rcclx against the stock library on this node (2+ GPUs) and "
                       "write the tuning file rcclx reads")
    p.add_argument("--out", help="the tuning file (default: RCCLX_TUNING_FILE, else "
                   "$XDG_CONFIG_HOME/rcclx/tuning.toml or ~/.config/rcclx/tuning.toml)")
    p.add_argument("--nranks", type=int, help="ranks (one GPU each; default: every visible GPU, at most 8)")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                   help="rcclx must be this much faster (default 0.05: 5%%)")
    p.add_argument("--dtypes", default="float,bfloat16", help="types measured (default float,bfloat16)")
    p.add_argument("--cycles", type=int, default=3, help="cycles per size (median over them; default 3)")
    p.add_argument("--bench-dir", help="folder of rccl-tests-compat's *_perf programs (default: the source "
                   "tree's build, else the one in the wheel)")
    p.add_argument("--keep", metavar="DIR", help="write the benchmark's JSON files into DIR")
    p.add_argument("--from", dest="inputs", nargs="+", metavar="JSON",
                   help="select from these benchmark JSON files (or folders of them) instead of measuring")
    return p
