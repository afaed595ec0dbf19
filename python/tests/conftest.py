"""Shared fixtures. python.sh (tests/cli/python.sh) sets REPRISE_LIB (the
tree's libreprise.so), REPRISE_BIN (its reprise binary, the reference the
bindings are compared with) and REPRISE_SHARED (test data)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("REPRISE_LIB", os.path.join(ROOT, "build", "libreprise.so"))

import reprise  # noqa: E402

SHARED = os.environ.get("REPRISE_SHARED", os.path.join(ROOT, "..", "shared"))
BIN = os.environ.get("REPRISE_BIN", os.path.join(ROOT, "build", "reprise"))
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
DEMO = os.path.join(ROOT, "models", "demo-llama.gguf")
TEXT_FILE = os.path.join(ROOT, "models", "war-and-peace-heldout.txt")
MODELS = {"stories": STORIES, "demo": DEMO}


def clean_env():
    """The environment without the sanitizer preload (for cc and pip)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


def cli(*args, check=True):
    """Runs the reprise binary; returns (stdout bytes, stderr text)."""
    p = subprocess.run([BIN, *map(str, args)], capture_output=True)
    if check and p.returncode != 0:
        raise AssertionError("reprise %s: exit %d: %s" % (" ".join(map(str, args)), p.returncode,
                                                        p.stderr.decode()[-500:]))
    return p.stdout, p.stderr.decode("utf-8", "replace"), p.returncode


@pytest.fixture(scope="session")
def text():
    with open(TEXT_FILE, encoding="utf-8") as f:
        return f.read()[:20000]


@pytest.fixture(scope="session")
def text_path(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("text") / "text.txt"
    p.write_text(text, encoding="utf-8")
    return str(p)


@pytest.fixture(scope="session")
def stories():
    return reprise.Model(STORIES, n_ctx=256, threads=1)


@pytest.fixture(scope="session", params=sorted(MODELS))
def any_model(request):
    return request.param, MODELS[request.param], reprise.Model(MODELS[request.param], n_ctx=256, threads=1)
