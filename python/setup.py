"""Build glue: setuptools-rust builds librcclx.so with cargo and ships it as a plain cdylib.

rcclx is a C library (the NCCL/RCCL API), not a Python extension: `Binding.NoBinding` makes
setuptools-rust run `cargo rustc --lib --release --crate-type cdylib` on the repository's
Cargo.toml (same profile, build script and kernels as `cargo build --release`, in cargo's own
target directory) and copy the cdylib into the package. Adjustments, all below:

* the file keeps cargo's name, `rcclx/librcclx.so`: it is loaded by path (LD_PRELOAD, ctypes,
  VLLM_NCCL_SO_PATH), never imported, so an extension-module suffix (`.cpython-311-...so`) would
  only hide it;
* the wheel is tagged `py3-none-<platform>`: the library does not link against Python, so one
  wheel serves every Python 3;
* the library is linked by `zig cc` against glibc 2.28 (`zig-link.sh`, given to rustc as
  `-C linker=` for the rcclx crate only, as cargo-zigbuild does), when a zig is found:
  `RCCLX_WHEEL_ZIG` (a path; `0` links with the system linker), else the kernels' `RCCLX_ZIG`,
  else `../.tools/zig/ziglang/zig` (`ci/install-toolchains.sh`), else `zig` on PATH;
* the platform tag is read from the built library: `manylinux_2_<N>_<arch>`, N the newest glibc
  version it needs (28 when zig linked it), if it needs nothing outside the manylinux set of
  system libraries; else `linux_<arch>`;
* the library in the wheel is stripped; its debug info goes to `librcclx.so.debug` next to
  cargo's output (`target/release/`), which the stripped library names (`.gnu_debuglink`);
* `RCCLX_WHEEL_BENCH` (a path; `ci/wheel.sh` builds it with `rccl-tests-compat/portable.sh`)
  puts the benchmark into the wheel as `rcclx/bin/rcclx_perf`, so that `python -m rcclx tune`
  runs from an installed wheel; the platform tag then covers it too.

Everything else is in pyproject.toml. Why not maturin: python/README.md, "Packaging".
"""

import os
import platform
import re
import runpy
import shutil
import struct
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools_rust import Binding, RustExtension, build_rust

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
# Relative: setuptools-rust resolves it against the build's working directory (this folder).
CARGO_TOML = os.path.join(os.pardir, "Cargo.toml")
# pyproject.toml sends setuptools' scratch folders here; setuptools checks that egg-base exists
# before it builds anything, and on a fresh clone nothing has made target/ yet.
os.makedirs(os.path.join(HERE, os.pardir, "target", "python-build"), exist_ok=True)
LIB_NAME = "librcclx.so"
GLIBC = "2.28"
# The benchmark's place in the package (rcclx/tune.py looks there).
BENCH_NAME = os.path.join("bin", "rcclx_perf")


def log(message):
    print(f"rcclx setup.py: {message}", file=sys.stderr)


def find_zig():
    """The zig that links the wheel's library, or None (see the module docstring)."""
    want = os.environ.get("RCCLX_WHEEL_ZIG", "")
    if want == "0":
        return None
    if want:
        if not (os.path.isfile(want) and os.access(want, os.X_OK)):
            sys.exit(f"RCCLX_WHEEL_ZIG={want}: not an executable file")
        return os.path.abspath(want)
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        return None
    tools = os.path.join(HERE, os.pardir, ".tools", "zig", "ziglang", "zig")
    for cand in (os.environ.get("RCCLX_ZIG"), tools):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    return shutil.which("zig")


ZIG = find_zig()
if ZIG:
    # Read by zig-link.sh (rustc runs it with cargo's environment, which is this one). Not
    # RCCLX_ZIG: that one is the build script's kernel compiler, and part of its stamp.
    os.environ["RCCLX_LINK_ZIG"] = ZIG
    os.environ["RCCLX_LINK_TARGET"] = f"{platform.machine()}-linux-gnu.{GLIBC}"


def elf_needs(path):
    """``(DT_NEEDED libraries, {library: [version names]})`` of an ELF64 little-endian file (its
    symbol version requirements, .gnu.version_r)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not an ELF64 little-endian file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def cstr(strtab, off):
        start = sections[strtab][4] + off
        return data[start : data.index(b"\0", start)].decode()

    needed, versions = [], {}
    for _, kind, _, _, offset, size, link, info, _, _ in sections:
        if kind == 6:  # SHT_DYNAMIC
            for i in range(0, size, 16):
                tag, val = struct.unpack_from("<qQ", data, offset + i)
                if tag == 1:  # DT_NEEDED
                    needed.append(cstr(link, val))
        elif kind == 0x6FFFFFFE:  # SHT_GNU_verneed: Elf64_Verneed entries, each with Vernaux
            at = offset
            for _ in range(info):
                _, count, file_, aux, nxt = struct.unpack_from("<HHIII", data, at)
                names = versions.setdefault(cstr(link, file_), [])
                a = at + aux
                for _ in range(count):
                    _, _, _, vname, anext = struct.unpack_from("<IHHII", data, a)
                    names.append(cstr(link, vname))
                    a += anext
                if not nxt:
                    break
                at += nxt
    return needed, versions


# What a manylinux wheel's library may need from the system (PEP 600, auditwheel's policies).
MANYLINUX_LIBS = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libutil.so.1",
    "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}


def platform_tag(lib, plat):
    """``manylinux_2_<N>_<arch>`` for a library that needs glibc 2.N at most (N >= 17) and nothing
    outside MANYLINUX_LIBS, else ``plat`` (setuptools' ``linux_<arch>``)."""
    if not plat.startswith("linux_"):
        return plat
    arch = plat[len("linux_") :]
    needed, versions = elf_needs(lib)
    newest = 17
    for name in needed:
        if name not in MANYLINUX_LIBS:
            log(f"{lib} needs {name}: the wheel is tagged {plat}")
            return plat
    for file_, names in versions.items():
        for v in names:
            m = re.fullmatch(r"GLIBC_2\.(\d+)(?:\.\d+)?", v)
            if m:
                newest = max(newest, int(m.group(1)))
            elif not re.fullmatch(r"GCC_[0-9.]+", v):
                log(f"{lib} needs {file_} version {v}: the wheel is tagged {plat}")
                return plat
    return f"manylinux_2_{newest}_{arch}"


def run(cmd):
    log(" ".join(cmd))
    subprocess.run(cmd, check=True)


class build_rust_cdylib(build_rust):
    """Install the cdylib under its own file name, stripped, with its debug info in
    ``librcclx.so.debug`` next to cargo's output (see the module docstring)."""

    def get_dylib_ext_path(self, ext, target_fname):
        path = super().get_dylib_ext_path(ext, target_fname)
        return os.path.join(os.path.dirname(path), LIB_NAME)

    def build_extension(self, ext):
        if ZIG:
            log(f"linking librcclx.so with {ZIG} ({os.environ['RCCLX_LINK_TARGET']}: glibc {GLIBC})")
        else:
            log("no zig (RCCLX_WHEEL_ZIG, RCCLX_ZIG, .tools/zig, PATH): librcclx.so is linked by "
                "the system linker, against this machine's glibc (the wheel's tag says which)")
        return super().build_extension(ext)

    def install_extension(self, ext, dylib_paths, build_artifact_dir):
        super().install_extension(ext, dylib_paths, build_artifact_dir)
        tool = shutil.which("objcopy")
        objcopy = [tool] if tool else ([ZIG, "objcopy"] if ZIG else None)
        for module_name, built in dylib_paths:
            ext_path = self.get_dylib_ext_path(ext, module_name or ext.name)
            if objcopy is None:
                log(f"no objcopy: {ext_path} keeps its debug info")
                continue
            debug = os.path.abspath(built) + ".debug"
            run(objcopy + ["--only-keep-debug", built, debug])
            # The debug link holds the file's name (looked up next to the library, in its .debug/
            # folder and under the debugger's debug-file directory) and its CRC.
            run(objcopy + ["--strip-all", f"--add-gnu-debuglink={debug}", ext_path])
            log(f"{ext_path}: {os.path.getsize(ext_path)} bytes, stripped; debug info in {debug} "
                f"({os.path.getsize(debug)} bytes)")


class build_py_bench(build_py):
    """Copies the benchmark named by ``RCCLX_WHEEL_BENCH`` into the package (module docstring)."""

    def run(self):
        super().run()
        bench = os.environ.get("RCCLX_WHEEL_BENCH")
        if not bench:
            return
        if not os.path.isfile(bench):
            sys.exit(f"RCCLX_WHEEL_BENCH={bench}: no such file")
        dest = os.path.join(self.build_lib, "rcclx", BENCH_NAME)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(bench, dest)
        os.chmod(dest, 0o755)
        log(f"{dest}: the benchmark from {bench}")


class bdist_wheel_py3(bdist_wheel):
    """Platform wheel (it holds a native library) for any Python 3: py3-none-<platform>, the
    platform read from the library (``platform_tag``)."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        tags = [platform_tag(f, plat) for f in (os.path.join(self.bdist_dir, "rcclx", name)
                                                for name in (LIB_NAME, BENCH_NAME)) if os.path.isfile(f)]
        # The oldest-compatible tag that covers every native file: the newest glibc any needs.
        if tags:
            plat = plat if plat in tags else max(tags, key=lambda t: int(t.split("_")[2]))
        return "py3", "none", plat


version = runpy.run_path(os.path.join(HERE, "rcclx", "_version.py"), run_name="rcclx_version")[
    "read_crate_version"
](os.path.join(HERE, CARGO_TOML))

setup(
    version=version,
    packages=["rcclx"],
    rust_extensions=[
        RustExtension(
            "rcclx.librcclx",
            path=CARGO_TOML,
            binding=Binding.NoBinding,
            # Always release (also for `pip install -e`): a debug rcclx is no use on a GPU.
            debug=False,
            # For the rcclx crate only (cargo rustc's trailing arguments): its dependencies and
            # build script stay cargo build's, so only the library is compiled and linked again.
            rustc_flags=["-C", f"linker={os.path.join(HERE, 'zig-link.sh')}"] if ZIG else [],
        )
    ],
    cmdclass={"build_rust": build_rust_cdylib, "build_py": build_py_bench, "bdist_wheel": bdist_wheel_py3},
    zip_safe=False,
)
