#!/usr/bin/env bash
# dslaunch as users get it: build the sdist and the wheel, check them with the ecosystem's own tools, install the
# wheel (not editable) into a fresh venv and run it from there, away from this checkout. `make check-wheel`;
# .ci/run runs it after lint.
#
#   PKG_VENV    the build tools (requirements/packaging.txt), kept between runs        [.venv-packaging]
#   TORCH_VENV  torch (with numpy, as .ci/run installs it) and nothing else, kept         [.venv-torch-base]
#               between runs: the fresh venv sees its site-packages through a .pth line,
#               so pip finds torch installed and puts every other dependency of the wheel
#               into the fresh venv
#   TORCH       the torch TORCH_VENV holds: pyproject's floor                           [torch==2.13.0]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
started=$SECONDS
step() { echo "check-wheel: $1 ($((SECONDS - started)) s)"; }
fail() { echo "check-wheel: FAILED: $1" >&2; exit 1; }
PYTHON=${PYTHON:-python3}
PKG_VENV=${PKG_VENV:-.venv-packaging}
TORCH_VENV=${TORCH_VENV:-.venv-torch-base}
TORCH=${TORCH:-torch==2.13.0}
work=$(mktemp -d "${TMPDIR:-/tmp}/dslaunch-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Quiet when it goes well, the whole output when it does not.
quiet() {
    local log="$work/step.log"
    "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$*"; }
}

# --- the tools, and torch on its own (each made once, then kept) -----------------------------------------------
[ -x "$PKG_VENV/bin/python" ] || quiet "$PYTHON" -m venv "$PKG_VENV"
quiet "$PKG_VENV/bin/python" -m pip install -r requirements/packaging.txt
# numpy: without it torch warns "Failed to initialize NumPy" at every import (torch does not require it).
if [ "$(cat "$TORCH_VENV/.torch-spec" 2>/dev/null)" != "$TORCH numpy" ]; then
    rm -rf "$TORCH_VENV"
    quiet "$PYTHON" -m venv --without-pip "$TORCH_VENV"
    quiet "$PKG_VENV/bin/python" -m pip --python "$TORCH_VENV/bin/python" install "$TORCH" numpy
    echo "$TORCH numpy" >"$TORCH_VENV/.torch-spec"
fi
TORCH_SITE=$("$TORCH_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
step "tools ready"

# --- build: the sdist, then the wheel from the unpacked sdist (so the sdist must be complete) ------------------
# No isolation: the pinned setuptools of PKG_VENV is the backend (build still checks pyproject's build-system
# requires). Any warning from our own metadata fails the check: the log must not warn or deprecate anything.
# PYTHONDONTWRITEBYTECODE (set on CI machines) only makes setuptools warn that it skips byte-compiling, which
# a wheel never ships: unset here, so that a warning left is about the project.
dist=$work/dist
quiet env -u PYTHONDONTWRITEBYTECODE "$PKG_VENV/bin/python" -m build --no-isolation --outdir "$dist" .
if grep -inE "warning|deprecat" "$work/step.log"; then
    fail "the build warned (above)"
fi
wheel=$(ls "$dist"/*.whl)
sdist=$(ls "$dist"/*.tar.gz)
step "built $(basename "$sdist") and $(basename "$wheel")"

# --- metadata and contents ------------------------------------------------------------------------------------
quiet "$PKG_VENV/bin/twine" check --strict "$sdist" "$wheel"
quiet "$PKG_VENV/bin/check-wheel-contents" "$wheel"
# Every module and data file of the package, in both: what is under dslaunch/ here (tracked or not) is what the
# wheel must hold, and nothing else may sit beside it at the top level.
"$PKG_VENV/bin/python" - "$wheel" "$sdist" <<'PY' || fail "contents (above)"
import pathlib, sys, tarfile, zipfile
want = {p.as_posix() for p in pathlib.Path("dslaunch").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
wheel = {n for n in zipfile.ZipFile(sys.argv[1]).namelist() if not n.split("/")[0].endswith(".dist-info")}
with tarfile.open(sys.argv[2]) as tar:
    sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/dslaunch/" in n and tar.getmember(n).isfile()}
bad = False
for name, got in (("wheel", wheel), ("sdist", {n for n in sdist if n.startswith("dslaunch/")})):
    for what, names in (("misses", want - got), ("has extra", got - want)):
        if names:
            bad = True
            print(f"the {name} {what}: {', '.join(sorted(names))}")
print(f"{len(want)} package files in both")
sys.exit(bad)
PY
step "twine check --strict, check-wheel-contents"

# --- a fresh venv: the wheel and its dependencies, torch from TORCH_VENV ----------------------------------------
venv=$work/venv
quiet "$PYTHON" -m venv --without-pip "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$TORCH_SITE" >"$site/_dslaunch_check_torch.pth"
echo "$TORCH" >"$work/torch-pin.txt"  # should pip want another torch, never the newest (a 5 GB CUDA build)
quiet "$PKG_VENV/bin/python" -m pip --python "$venv/bin/python" install "$wheel" -c "$work/torch-pin.txt"
if grep -inE "deprecat" "$work/step.log"; then
    fail "pip warned while installing the wheel (above)"
fi
"$venv/bin/python" -c "import sys, torch; sys.exit(not torch.__file__.startswith('$TORCH_SITE/'))" \
    || fail "torch in the fresh venv is not TORCH_VENV's"
step "installed the wheel and its dependencies into a fresh venv: $(grep -o 'Successfully installed.*' "$work/step.log")"

# --- run it from the install, outside the checkout --------------------------------------------------------------
run=$work/run
mkdir "$run"
cat >"$run/allreduce.py" <<'PY'
import torch

import dslaunch

engine = dslaunch.engine()
total = torch.tensor([float(engine.rank + 1)])
torch.distributed.all_reduce(total)
print(f"all_reduce rank={engine.rank} world={engine.world_size} sum={total.item():g} from={dslaunch.__file__}")
PY
cd "$run"
export PATH="$venv/bin:$PATH"
unset PYTHONPATH VIRTUAL_ENV
[ "$(command -v dslaunch)" = "$venv/bin/dslaunch" ] || fail "dslaunch is not the fresh venv's console script"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
[ "$(dslaunch --version)" = "dslaunch $version" ] || fail "dslaunch --version printed '$(dslaunch --version)'"
dslaunch --help >"$work/help.txt" || fail "dslaunch --help"
grep -q "^Usage: dslaunch \[OPTIONS\] SCRIPT" "$work/help.txt" || fail "dslaunch --help: no usage line"
dslaunch --nproc-per-node 2 --master-port 0 --preload torch allreduce.py >"$work/job.txt" 2>&1 \
    || { cat "$work/job.txt" >&2; fail "the 2-rank job with --preload torch"; }
# Exactly each rank's line: a warning or any other line, from dslaunch or what it loads, fails the check.
for rank in 0 1; do
    echo "[rank$rank]: all_reduce rank=$rank world=2 sum=3 from=$site/dslaunch/__init__.py"
done >"$work/expected.txt"
sort "$work/job.txt" | diff "$work/expected.txt" - >&2 || fail "the 2-rank job's output (diff above: expected, got)"
sed 's/^/  /' "$work/job.txt"
step "dslaunch --version, --help and a 2-rank --preload torch all_reduce ran from the installed wheel"
echo "check-wheel: ok in $((SECONDS - started)) s"
