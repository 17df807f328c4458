"""Build glue: setuptools-rust builds librcclx.so with cargo and ships it as a plain cdylib.

rcclx is a C library (the NCCL/RCCL API), not a Python extension: `Binding.NoBinding` makes
setuptools-rust run `cargo rustc --lib --release --crate-type cdylib` on the repository's
Cargo.toml (same profile, build script and kernels as `cargo build --release`, in cargo's own
target directory) and copy the cdylib into the package. Two adjustments, both below:

* the file keeps cargo's name, `rcclx/librcclx.so`: it is loaded by path (LD_PRELOAD, ctypes,
  VLLM_NCCL_SO_PATH), never imported, so an extension-module suffix (`.cpython-311-...so`) would
  only hide it;
* the wheel is tagged `py3-none-<platform>`: the library does not link against Python, so one
  wheel serves every Python 3.

Everything else is in pyproject.toml. Why not maturin: python/README.md, "Packaging".
"""

import os
import runpy

from setuptools import setup
from setuptools_rust import Binding, RustExtension, build_rust

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
# Relative: setuptools-rust resolves it against the build's working directory (this folder).
CARGO_TOML = os.path.join(os.pardir, "Cargo.toml")
LIB_NAME = "librcclx.so"


class build_rust_cdylib(build_rust):
    """Install the cdylib under its own file name (see the module docstring)."""

    def get_dylib_ext_path(self, ext, target_fname):
        path = super().get_dylib_ext_path(ext, target_fname)
        return os.path.join(os.path.dirname(path), LIB_NAME)


class bdist_wheel_py3(bdist_wheel):
    """Platform wheel (it holds a native library) for any Python 3: py3-none-<platform>."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
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
        )
    ],
    cmdclass={"build_rust": build_rust_cdylib, "bdist_wheel": bdist_wheel_py3},
    zip_safe=False,
)
