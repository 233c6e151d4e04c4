# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dslaunch-installed
# A second venv with the newest torch (requirements/torch-newest.txt): torch-rank tests run on both ends.
NEWEST ?= .venv-torch-newest
NEWEST_PY := $(NEWEST)/bin/python
NEWEST_STAMP := $(NEWEST)/.dslaunch-installed

# pytest keeps its rewritten test modules in __pycache__ only where bytecode may be written: ~3 s of the fast tier.
PYTEST_ENV := env -u PYTHONDONTWRITEBYTECODE
# Three test workers on two cores: most tests wait on processes (ssh handshakes, teardown grace, rendezvous), and
# the tests of one shared test bed (Slurm, network namespaces) stay on one worker (tests/conftest.py).
WORKERS ?= -n 3 --dist loadgroup
# The pure tier: no test that starts a process (tests/conftest.py fails one that does); seconds, not minutes.
FAST := not launch and not cluster and not torch

.PHONY: demo test test-fast test-preload lint install install-newest bench clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip freeze | grep -i '^torch==' > $(VENV)/torch-pin.txt || true  # the extras never move torch
	$(PY) -m pip install -q -e '.[test,lint]' -c $(VENV)/torch-pin.txt --config-settings editable_mode=compat
	$(PY) -m compileall -q dslaunch  # bytecode even where PYTHONDONTWRITEBYTECODE is set: every rank imports it
	touch $(STAMP)

$(NEWEST_STAMP): pyproject.toml requirements/torch-newest.txt
	test -x $(NEWEST_PY) || python3 -m venv $(NEWEST)
	$(NEWEST_PY) -m pip install -q -r requirements/torch-newest.txt
	$(NEWEST_PY) -m pip freeze | grep -i '^torch==' > $(NEWEST)/torch-pin.txt || true
	$(NEWEST_PY) -m pip install -q -e '.[test]' -c $(NEWEST)/torch-pin.txt --config-settings editable_mode=compat
	touch $(NEWEST_STAMP)

install: $(STAMP)

install-newest: $(NEWEST_STAMP)

demo: install
	$(VENV)/bin/dslaunch --nproc-per-node 4 --master-port 0 --mesh dp=2,tp=2 examples/train.py --steps 8

lint: install
	$(VENV)/bin/ruff check dslaunch tests bench testbeds
	$(VENV)/bin/ruff format --check dslaunch tests bench examples testbeds
	$(VENV)/bin/mypy dslaunch

# The whole suite on the lowest torch, then on the newest only the tests of torch's own API (-m torch_api).
test: install install-newest
	$(PY) -m pytest -q $(WORKERS) --durations=15
	$(NEWEST_PY) -m pytest -q $(WORKERS) --durations=10 -m torch_api

test-fast: install
	$(PYTEST_ENV) $(PY) -m pytest -q -m "$(FAST)"

# Every test that starts torch ranks, with --preload torch forced on (docs/preload.md); not part of `make test`.
test-preload: install
	DSLAUNCH_PRELOAD=torch $(PY) -m pytest -q -m torch

bench: install
	$(PY) bench/bench_launch.py

clean:
	rm -rf $(VENV) $(NEWEST) build *.egg-info .pytest_cache
