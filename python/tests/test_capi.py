"""``rcclx._capi``'s AllToAllv forms agree with the C declarations of ``include/rcclx.h`` (generated
from the one list of src/abi/own/alltoallv.rs): the same forms, each with its ``Ex`` twin, and
argument types of the same kind in the same order. No GPU needed."""

import ctypes
import os
import re
import unittest

from rcclx import _capi

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "rcclx.h")


def declarations(text):
    """``{name: [C parameter, ...]}`` of the ``rcclxAllToAllv*`` functions of a header."""
    out = {}
    for name, params in re.findall(r"ncclResult_t (rcclxAllToAllv\w*)\(([^)]*)\);", text):
        out[name] = [" ".join(p.split()) for p in params.split(",")]
    return out


def kind_of_c(param):
    """What ctypes must pass for a C parameter: a pointer, a size, an int or a handle."""
    if "*" in param:
        return "pointer"
    ctype = param.rsplit(" ", 1)[0]
    return {"size_t": "size", "ncclDataType_t": "int", "ncclComm_t": "pointer", "rcclxStream_t": "pointer"}[ctype]


def kind_of_ctypes(t):
    if t is ctypes.c_void_p or (isinstance(t, type) and issubclass(t, ctypes._Pointer)):
        return "pointer"
    return {ctypes.c_size_t: "size", ctypes.c_int: "int"}[t]


@unittest.skipUnless(os.path.exists(HEADER), "include/rcclx.h not found (not run from a checkout)")
class AllToAllvForms(unittest.TestCase):
    def test_forms_match_the_header(self):
        with open(HEADER) as f:
            declared = declarations(f.read())
        mirrored = {}
        for form, argtypes in _capi.ALLTOALLV_FORMS.items():
            mirrored[form] = argtypes
            mirrored[form + "Ex"] = argtypes + [_capi.ALLTOALLV_OPTIONS_P]
        self.assertEqual(sorted(declared), sorted(mirrored))
        for name, params in declared.items():
            self.assertEqual(
                [kind_of_c(p) for p in params], [kind_of_ctypes(t) for t in mirrored[name]], f"{name}: {params}"
            )

    def test_the_parser_sees_a_declaration(self):
        text = "ncclResult_t rcclxAllToAllvX(const void *a,\n    size_t n, ncclDataType_t t);"
        self.assertEqual(declarations(text), {"rcclxAllToAllvX": ["const void *a", "size_t n", "ncclDataType_t t"]})
        self.assertEqual([kind_of_c(p) for p in declarations(text)["rcclxAllToAllvX"]], ["pointer", "size", "int"])


if __name__ == "__main__":
    unittest.main()
