"""Generate the C source of ``dpmpi._cext`` with cffi (out-of-line API mode).

Called by meson (``custom_target``) as ``python build_ffi.py OUTPUT.c``; the declarations are read
from ``dpmpi_c.h`` next to this file, the implementation lives in ``dpmpi_c.c`` and is compiled
into the same extension module by meson.
"""
import pathlib
import sys

import cffi

HERE = pathlib.Path(__file__).resolve().parent


def make_builder() -> cffi.FFI:
    ffibuilder = cffi.FFI()
    ffibuilder.cdef((HERE / "dpmpi_c.h").read_text())
    ffibuilder.set_source("dpmpi._cext", '#include "dpmpi_c.h"')
    return ffibuilder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_ffi.py OUTPUT.c")
    make_builder().emit_c_code(sys.argv[1])
