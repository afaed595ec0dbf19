"""The ctypes mirrors of the C structs have the C layout: a C program compiled
against include/ prints every struct's size and every field's offset."""
import ctypes
import os
import subprocess

from conftest import ROOT, clean_env
from reprise import _lib


def test_struct_layouts(tmp_path):
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "reprise_tools.h"',
             "int main(void) {"]
    want = []
    for cname, cls in _lib.STRUCTS.items():
        lines.append('printf("%%zu\\n", sizeof(%s));' % cname)
        want.append("%s %d" % (cname, ctypes.sizeof(cls)))
        for f in cls._fields_:
            lines.append('printf("%%zu\\n", offsetof(%s, %s));' % (cname, f[0]))
            want.append("%s.%s %d" % (cname, f[0], getattr(cls, f[0]).offset))
    lines += ["return 0;", "}"]
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "abi"
    subprocess.run(["cc", "-std=c11", "-I" + os.path.join(ROOT, "include"), "-o", str(exe), str(src)],
                   check=True, env=clean_env())
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, env=clean_env()).stdout
    got = [w.rsplit(" ", 1)[0] + " " + v for w, v in zip(want, out.split())]
    assert len(out.split()) == len(want)
    assert got == want
    assert len(_lib.STRUCTS) >= 16


def test_version():
    import reprise
    assert reprise.version() == _lib.API_VERSION
    hdr = open(os.path.join(ROOT, "include", "reprise.h")).read()
    assert '#define RP_VERSION "%s"' % _lib.API_VERSION in hdr
