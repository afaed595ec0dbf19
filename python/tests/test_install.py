"""`pip install ./python` into a fresh venv (offline: the package builds
with its own backend, no index) gives a package that finds its library with nothing
set: the library the tree built, bundled into the package."""
import os
import shutil
import subprocess
import sys

from conftest import ROOT, STORIES


def test_pip_install_fresh_venv(tmp_path):
    lib = os.path.realpath(os.environ["REPRISE_LIB"])
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the source tree
    shutil.copytree(os.path.join(ROOT, "python"), src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    venv = tmp_path / "venv"
    # a bare venv (no pip of its own: the running pip installs into it, --python)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = dict(os.environ, REPRISE_BUILD=os.path.dirname(lib))
    env.pop("REPRISE_LIB")
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-index", str(src)],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    code = ("import reprise, reprise._lib as L, os; m = reprise.Model(%r, n_ctx=64, threads=1); "
            "print(L._find()); print(os.path.realpath(L._find()) != %r); "
            "print(m.generate('Once upon a time', n_predict=8, temperature=0))" % (STORIES, lib))
    p = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    where, copied, text = p.stdout.split("\n", 2)
    assert where.startswith(str(venv)) and where.endswith("reprise/libreprise.so") and copied == "True"
    assert text.strip() and "there was" in text
