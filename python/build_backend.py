"""The package's PEP 517 build backend: a wheel is a zip of reprise/*.py, the
shared library the source tree built, and its dist-info. It needs nothing
outside the standard library, so `pip install ./python` works offline.

The library bundled is $REPRISE_BUILD/libreprise.so (default ../build, the
release tree); with one the wheel is tagged for this platform, without one it
is pure Python (py3-none-any) and loads libreprise.so.0 from the system or
$REPRISE_LIB at import time. There is no compiled code of the package's own."""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "reprise"


def _version():
    with open(os.path.join(HERE, NAME, "_lib.py"), encoding="utf-8") as f:
        return re.search(r'^API_VERSION = "([^"]+)"', f.read(), re.M).group(1)


def _library():
    tree = os.environ.get("REPRISE_BUILD", os.path.join(HERE, "..", "build"))
    so = os.path.join(tree, "libreprise.so")
    return os.path.realpath(so) if os.path.exists(so) else None


def _metadata():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Python bindings (ctypes) of "
            "reprise, GGUF inference over layer plans\nRequires-Python: >=3.8\n"
            "Provides-Extra: test\nRequires-Dist: pytest; extra == \"test\"\n"
            "Requires-Dist: numpy; extra == \"test\"\n"
            "Description-Content-Type: text/markdown\n\n%s" % (NAME, _version(), readme))


def _tag(lib):
    if not lib:
        return "py3-none-any"
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _record_line(arc, data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, h, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib, ver = _library(), _version()
    tag = _tag(lib)
    files = []
    for fn in sorted(os.listdir(os.path.join(HERE, NAME))):
        if fn.endswith(".py"):
            with open(os.path.join(HERE, NAME, fn), "rb") as f:
                files.append(("%s/%s" % (NAME, fn), f.read()))
    if lib:
        with open(lib, "rb") as f:
            files.append(("%s/libreprise.so" % NAME, f.read()))
    di = "%s-%s.dist-info" % (NAME, ver)
    files.append((di + "/METADATA", _metadata().encode()))
    files.append((di + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: reprise build_backend\n"
                                  "Root-Is-Purelib: %s\nTag: %s\n" % ("false" if lib else "true", tag)).encode()))
    files.append((di + "/top_level.txt", (NAME + "\n").encode()))
    record = [_record_line(a, d) for a, d in files] + [di + "/RECORD,,"]
    name = "%s-%s-%s.whl" % (NAME, ver, tag)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            z.writestr(zi, data, zipfile.ZIP_DEFLATED)
        z.writestr(di + "/RECORD", "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "build_backend.py", "README.md"] + [
                "%s/%s" % (NAME, f) for f in sorted(os.listdir(os.path.join(HERE, NAME))) if f.endswith(".py")]:
            t.add(os.path.join(HERE, rel), arcname="%s/%s" % (base, rel))
        pkg = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (NAME, _version())).encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg)
        t.addfile(ti, io.BytesIO(pkg))
    return name
