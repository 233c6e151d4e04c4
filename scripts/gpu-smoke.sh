#!/usr/bin/env bash
# The GPU tier (tests/gpu, docs/gpu.md) from a fresh clone in at most 8 minutes, install included: find or make a
# Python with a CUDA torch, show the GPUs, run `pytest -m gpu tests/gpu`, and end with ONE summary line:
#   gpu-smoke: 10 passed, 1 skipped in 212 s (torch 2.15.0+cu132, cuda 13.2, 1 x NVIDIA H200, driver 580.159.04)
#
#   bash scripts/gpu-smoke.sh                 run it (without a GPU every test is skipped, and it exits 0)
#   bash scripts/gpu-smoke.sh --fetch-wheels  where PyPI is reachable: save into .gpu-wheels/ the wheels that a GPU
#                                             machine without a network lacks (dslaunch's structlog and orjson,
#                                             pytest-timeout); take that folder along to it
#
# Which Python (the first that applies):
#   GPU_SMOKE_VENV=DIR      this venv as it is, e.g. .venv or .venv-torch-newest here (nothing is downloaded)
#   GPU_SMOKE_PYTHON=EXE    this interpreter and its torch
#   GPU_SMOKE_INSTALL=auto  (default) python3 if its torch is a CUDA build (a GPU image's own torch, no network
#                           needed), else `newest`; `newest`: a venv in GPU_SMOKE_DIR with
#                           requirements/torch-newest.txt (about 5 GB from PyPI)
# Only what that Python lacks is added (into GPU_SMOKE_DIR/site, on PYTHONPATH): from .gpu-wheels/ when it
# holds wheels, else from PyPI.
#   GPU_SMOKE_DIR=DIR       venv, added packages, log (default /tmp/dslaunch-gpu-smoke)
#   GPU_SMOKE_LOG=FILE      pytest's whole output (default GPU_SMOKE_DIR/pytest.log)
#   GPU_SMOKE_BUDGET=S      the limit for everything, in seconds (default 480)
# Exit status: pytest's (0: every test passed or was skipped); 124 when the budget ran out; 3 when a GPU is here
# but no test passed (torch cannot use it: see the skip reasons); 2 when it cannot run at all.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUDGET=${GPU_SMOKE_BUDGET:-480}
WORK=${GPU_SMOKE_DIR:-/tmp/dslaunch-gpu-smoke}
WHEELS=$ROOT/.gpu-wheels
LOG=${GPU_SMOKE_LOG:-$WORK/pytest.log}
SITE=$WORK/site
# module=distribution: what dslaunch and tests/gpu import (torch comes with the Python chosen)
NEEDS=(click=click psutil=psutil structlog=structlog orjson=orjson numpy=numpy pytest=pytest pytest_timeout=pytest-timeout)
WHEEL_SPECS=("structlog>=24.1" "orjson>=3.9" "pytest-timeout>=2.3")
PY=""

note() { echo "gpu-smoke: $*"; }
left() { echo $((BUDGET - SECONDS)); }

# Run "$@" within what is left of the budget.
limited() {
    local t
    t=$(left)
    if ((t < 5)); then
        note "out of time before: $*"
        return 124
    fi
    timeout -k 10 "$t" "$@"
}

fetch_wheels() {
    mkdir -p "$WHEELS"
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version "${GPU_SMOKE_WHEEL_PYTHON:-3.12}" --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        -d "$WHEELS" "${WHEEL_SPECS[@]}"
    note "wheels for Python ${GPU_SMOKE_WHEEL_PYTHON:-3.12} in $WHEELS:"
    ls -1 "$WHEELS"
}

has_cuda_torch() {
    "$1" -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1
}

make_venv() {
    local venv=$WORK/venv links=()
    [[ -n $(ls "$WHEELS"/*.whl 2>/dev/null) ]] && links=(--find-links "$WHEELS")
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    note "installing requirements/torch-newest.txt and the test needs into $venv"
    limited "$venv/bin/python" -m pip install -q --disable-pip-version-check "${links[@]}" \
        -r requirements/torch-newest.txt "${NEEDS[@]#*=}" || {
        note "cannot run: installing into $venv failed (exit $?; no network? GPU_SMOKE_PYTHON names a Python with torch)"
        exit 2
    }
    PY=$venv/bin/python
}

choose_python() {
    if [[ -n ${GPU_SMOKE_VENV:-} ]]; then
        PY=$GPU_SMOKE_VENV/bin/python
    elif [[ -n ${GPU_SMOKE_PYTHON:-} ]]; then
        PY=$GPU_SMOKE_PYTHON
    elif [[ ${GPU_SMOKE_INSTALL:-auto} == auto ]] && has_cuda_torch python3; then
        PY=$(command -v python3)
        note "using the CUDA torch python3 already has ($PY): nothing to download"
    else
        make_venv
    fi
    [[ -x $PY || -x $(command -v "$PY" 2>/dev/null) ]] || {
        note "cannot run: no Python at $PY"
        exit 2
    }
}

missing_needs() {
    "$PY" - "${NEEDS[@]}" <<'EOF'
import importlib.util
import sys

pairs = (arg.split("=") for arg in sys.argv[1:])
print(" ".join(dist for module, dist in pairs if importlib.util.find_spec(module) is None))
EOF
}

add_missing() {
    local missing from=()
    missing=$(missing_needs)
    [[ -z $missing ]] && return 0
    [[ -n $(ls "$WHEELS"/*.whl 2>/dev/null) ]] && from=(--no-index --find-links "$WHEELS")
    note "adding $missing into $SITE ${from:+(from $WHEELS)}"
    # shellcheck disable=SC2086  # one word per distribution
    limited "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$SITE" "${from[@]}" $missing ||
        note "could not add all of: $missing"
    missing=$(missing_needs)
    if [[ -n $missing ]]; then
        note "cannot run: $PY lacks $missing (no network? run 'bash scripts/gpu-smoke.sh --fetch-wheels' where PyPI is reachable and bring .gpu-wheels/)"
        exit 2
    fi
}

show_machine() {
    GPUS=0
    GPU_NAME=""
    DRIVER=""
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 30 nvidia-smi -L || true
        GPUS=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
        GPU_NAME=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
        DRIVER=$(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
    else
        echo "nvidia-smi: not found (no NVIDIA driver here)"
    fi
    read -r TORCH CUDA < <("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda or "none")' 2>/dev/null ||
        echo "unimportable none")
    echo "python $("$PY" -c 'import sys; print(sys.version.split()[0])') at $PY; torch $TORCH, built for CUDA $CUDA"
}

run_tests() {
    mkdir -p "$(dirname "$LOG")"
    set +e
    limited "$PY" -m pytest -m gpu tests/gpu -q -rs --durations=0 -p no:cacheprovider 2>&1 | tee "$LOG"
    RC=${PIPESTATUS[0]}
    set -e
    COUNTS=$(grep -E '^=* *([0-9]+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)|no tests ran)' "$LOG" |
        tail -1 | sed -E 's/^=+ //; s/ =+$//; s/ in [0-9.]+s.*$//' || true)
    if ((RC == 124 || RC == 137)); then
        COUNTS="timed out (budget ${BUDGET} s)${COUNTS:+, $COUNTS}"
        RC=124
    fi
    [[ -n $COUNTS ]] || COUNTS="no pytest summary (exit $RC)"
}

main() {
    if [[ ${1:-} == --fetch-wheels ]]; then
        fetch_wheels
        return 0
    fi
    mkdir -p "$WORK"
    choose_python
    export PYTHONPATH=$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}
    add_missing
    export PYTHONUNBUFFERED=1
    show_machine
    run_tests
    local extra=""
    if ((RC == 0 && GPUS > 0)) && ! grep -qE '[0-9]+ passed' <<<"$COUNTS"; then
        extra="; a GPU is here but no test passed: see the skip reasons in $LOG"
        RC=3
    fi
    echo "pytest log: $LOG"
    local gpu="no GPU"
    ((GPUS > 0)) && gpu="$GPUS x ${GPU_NAME:-GPU}${DRIVER:+, driver $DRIVER}"
    echo "gpu-smoke: $COUNTS in $SECONDS s (torch $TORCH, cuda $CUDA, $gpu)$extra"
    return "$RC"
}

main "$@"
