"""The FP8 format check of ``rcclx.all_to_all_v_dynamic``'s coded delivery (issue 36): an FP8 output
dtype that is not the device's format (gfx942: E4M3FNUZ; NVIDIA and gfx950: E4M3FN) is a
ValueError; ``uint8`` always passes; the format comes from the loaded rcclx (``rcclxGetInfo``'s
``devices``), else from the GPU's arch.

No GPU and no torch needed: a stand-in ``torch`` module (tensors that are metadata only) is put in
``sys.modules`` for each test, so the real ``all_to_all_v_dynamic`` runs up to its checks. ci/wheel.sh
runs this file against the installed wheel (``python -m unittest discover -s python/tests``).
"""

import ctypes
import json
import os
import subprocess
import sys
import types
import unittest

import rcclx
from rcclx import _capi


class _Dtype:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __str__(self):
        return f"torch.{self.name}"


_DTYPES = {n: _Dtype(n, s) for n, s in [("float32", 4), ("bfloat16", 2), ("int64", 8), ("uint8", 1),
                                         ("float8_e4m3fn", 1), ("float8_e4m3fnuz", 1)]}


class _Tensor:
    """Shape, dtype, device and an address: what the wrapper reads before it calls the library."""

    _next = 1 << 20

    def __init__(self, shape, dtype, device=0):
        self.shape, self.dtype, self.device = tuple(shape), _DTYPES[dtype], device
        self.is_cuda = True
        self.ptr = _Tensor._next
        _Tensor._next += (self.numel() * self.element_size() + 4095) // 4096 * 4096 + 4096

    def is_contiguous(self):
        return True

    def dim(self):
        return len(self.shape)

    def get_device(self):
        return self.device

    def data_ptr(self):
        return self.ptr

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self.dtype.size


def _fake_torch(arch):
    """A stand-in torch: ROCm with ``arch`` as device 0's gcnArchName, or CUDA when ``arch`` is None."""
    torch = types.ModuleType("torch")
    torch.Tensor = _Tensor
    for name, dtype in _DTYPES.items():
        setattr(torch, name, dtype)
    torch.version = types.SimpleNamespace(hip="7.0" if arch else None, cuda=None if arch else "13.0")
    torch.cuda = types.SimpleNamespace(
        current_device=lambda: 0,
        get_device_properties=lambda device=None: types.SimpleNamespace(gcnArchName=arch or ""),
    )
    return torch


class _Handle:
    """A stand-in for the loaded rcclx: ``rcclxGetInfo`` returns ``info``; other functions are
    missing, as in an older library (AttributeError, as ctypes raises)."""

    def __init__(self, info):
        self.text = json.dumps(info).encode()

    def __getitem__(self, name):
        if name != "rcclxGetInfo":
            raise AttributeError(name)

        def f():
            return self.text

        return f


class CodedOutputFormat(unittest.TestCase):
    def setUp(self):
        self.saved = {k: sys.modules.get(k) for k in ("torch", "rcclx._codec_model")}
        self.saved_loaded = rcclx._loaded
        rcclx._FP8_FORMATS.clear()
        rcclx._A2AV = None
        rcclx._A2AV_COMMS.clear()

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        if "_codec_model" in vars(rcclx):
            del rcclx._codec_model  # imported with the stand-in torch
        rcclx._loaded = self.saved_loaded
        rcclx._FP8_FORMATS.clear()
        rcclx._A2AV = None

    def use(self, arch, handle=None):
        sys.modules["torch"] = _fake_torch(arch)
        sys.modules.pop("rcclx._codec_model", None)
        if "_codec_model" in vars(rcclx):
            del rcclx._codec_model
        rcclx._loaded = lambda want_path=True: (handle, None)

    def call(self, out_dtype):
        """The coded AllToAllv with an ``out_dtype`` output; returns the exception it raised."""
        rows, row = 8, 256
        inp = _Tensor((rows, row), "bfloat16")
        out = _Tensor((rows, row), out_dtype)
        scales = _Tensor((rows, row // 128), "float32")
        splits = _Tensor((2,), "int64")
        with self.assertRaises(Exception) as caught:
            rcclx.all_to_all_v_dynamic(inp, splits, out, group=0x1234, wire="fp8", output_scales=scales)
        return caught.exception

    def assert_rejected(self, out_dtype, fmt):
        e = self.call(out_dtype)
        self.assertIsInstance(e, ValueError, e)
        msg = str(e)
        self.assertIn(f"torch.{out_dtype}", msg)
        self.assertIn(f"{fmt.upper()} codes", msg)
        self.assertIn(f"torch.float8_{fmt}", msg)

    def assert_accepted(self, out_dtype):
        # Past the dtype checks the call needs a loaded rcclx with its AllToAllv: RuntimeError.
        e = self.call(out_dtype)
        self.assertIsInstance(e, RuntimeError, e)
        self.assertNotIsInstance(e, ValueError)

    def test_gfx942_takes_fnuz_or_uint8_and_rejects_fn(self):
        self.use("gfx942:sramecc+:xnack-")
        self.assert_rejected("float8_e4m3fn", "e4m3fnuz")
        self.assert_accepted("float8_e4m3fnuz")
        self.assert_accepted("uint8")

    def test_nvidia_and_gfx950_take_fn_or_uint8_and_reject_fnuz(self):
        for arch in (None, "gfx950:sramecc+:xnack-"):
            self.use(arch)
            rcclx._FP8_FORMATS.clear()
            self.assert_rejected("float8_e4m3fnuz", "e4m3fn")
            self.assert_accepted("float8_e4m3fn")
            self.assert_accepted("uint8")

    def test_the_loaded_libraries_answer_comes_first(self):
        # torch says gfx942, the loaded rcclx says its kernels on device 0 write E4M3FN: rcclx wins.
        info = {"devices": [{"device": 0, "arch": "gfx942", "kernels": "gfx942", "fp8_format": "e4m3fn"}]}
        self.use("gfx942:sramecc+:xnack-", _Handle(info))
        self.assert_rejected("float8_e4m3fnuz", "e4m3fn")
        rcclx._FP8_FORMATS.clear()
        self.assert_accepted("float8_e4m3fn")

    def test_without_an_answer_from_the_library_the_arch_decides(self):
        for info in ({"devices": []}, {"devices": [{"device": 0, "kernels": None, "fp8_format": None}]}, {}):
            self.use("gfx942:sramecc+:xnack-", _Handle(info))
            rcclx._FP8_FORMATS.clear()
            self.assert_rejected("float8_e4m3fn", "e4m3fnuz")

    def test_device_fp8_format_reads_rcclxGetInfo(self):
        info = {"devices": [{"device": 0, "fp8_format": "e4m3fnuz"}, {"device": 1, "error": "x"},
                            {"device": 2, "fp8_format": None}]}
        h = _Handle(info)
        self.assertEqual(_capi.device_fp8_format(h, 0), "e4m3fnuz")
        for device in (1, 2, 3):
            self.assertIsNone(_capi.device_fp8_format(h, device))
        self.assertIsNone(_capi.device_fp8_format(_Handle([1, 2]), 0))  # not an object

        class Old:
            def __getitem__(self, name):
                raise AttributeError(name)

        self.assertIsNone(_capi.device_fp8_format(Old(), 0))


class LibraryInfo(unittest.TestCase):
    def test_the_real_library_reports_fp8_formats_and_devices(self):
        # In a child: loading the library by path makes it the rcclx the other tests would find.
        code = (
            "import ctypes, json, sys, rcclx\n"
            "from rcclx import _capi\n"
            "h = ctypes.CDLL(rcclx.library_path())\n"
            "info = _capi.info(h)\n"
            "print(json.dumps({k: info.get(k) for k in ('gpu_targets', 'fp8_formats', 'devices', 'gpu_runtime')}))\n"
        )
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        p = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        d = json.loads(p.stdout)
        want = {"gfx942": "e4m3fnuz", "gfx950": "e4m3fn", "sm_90": "e4m3fn"}
        self.assertEqual(d["fp8_formats"], {t: want[t] for t in d["gpu_targets"]})
        self.assertIsInstance(d["devices"], list)
        self.assertIsInstance(d["gpu_runtime"], dict)
        for dev in d["devices"]:
            self.assertIn(dev.get("fp8_format", "error"), ("e4m3fn", "e4m3fnuz", None, "error"))


if __name__ == "__main__":
    unittest.main()
