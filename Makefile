# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
# What is installed in $(VENV), a stamp each: dslaunch (editable) with its runtime dependencies alone (`make demo`),
# then the test extra (`make test`) and the lint extra (`make lint`).
STAMP := $(VENV)/.dslaunch-installed
TEST_STAMP := $(VENV)/.dslaunch-test
LINT_STAMP := $(VENV)/.dslaunch-lint
# The torch a venv without one gets: pyproject's floor, pinned as .ci/run pins it, so pip never picks the newest
# torch, a CUDA build of about 5 GB on Linux. Where pip's find-links hold the CPU wheel (as on the CI machines,
# /opt/wheels), 2.13.0+cpu sorts above 2.13.0 and that is the one installed. numpy comes with it, as in .ci/run:
# torch does not require it but warns "Failed to initialize NumPy" in every rank without it.
TORCH ?= torch==2.13.0
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

.PHONY: demo test test-fast test-preload lint install install-dev install-newest check-wheel bench clean test-frameworks-newest

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# $(call install,EXTRAS): torch first where the venv has none, then dslaunch (editable) with EXTRAS ("", "[test]",
# ...), torch held where it is. pyproject's package-dir makes the editable install a plain .pth path (no deprecated
# editable_mode=compat, no import hook in every interpreter).
define install
	$(PY) -m pip show -q torch >/dev/null 2>&1 || $(PY) -m pip install -q '$(TORCH)' numpy
	$(PY) -m pip freeze | grep -i '^torch==' > $(VENV)/torch-pin.txt || true  # the extras never move torch
	$(PY) -m pip install -q -e '.$(1)' -c $(VENV)/torch-pin.txt
	$(PY) -m compileall -q dslaunch  # bytecode even where PYTHONDONTWRITEBYTECODE is set: every rank imports it
endef

$(STAMP): $(PY) pyproject.toml
	$(call install,)
	touch $(STAMP)

$(TEST_STAMP): $(PY) pyproject.toml
	$(call install,[test])
	touch $(STAMP) $(TEST_STAMP)

$(LINT_STAMP): $(PY) pyproject.toml
	$(call install,[lint])
	touch $(STAMP) $(LINT_STAMP)

$(NEWEST_STAMP): pyproject.toml requirements/torch-newest.txt
	test -x $(NEWEST_PY) || python3 -m venv $(NEWEST)
	$(NEWEST_PY) -m pip install -q -r requirements/torch-newest.txt
	$(NEWEST_PY) -m pip freeze | grep -i '^torch==' > $(NEWEST)/torch-pin.txt || true
	$(NEWEST_PY) -m pip install -q -e '.[test]' -c $(NEWEST)/torch-pin.txt
	touch $(NEWEST_STAMP)

install: $(STAMP)

# Both extras in one pip run (.ci/run: one editable build, not three).
comma := ,
install-dev: $(PY)
	$(call install,[test$(comma)lint])
	touch $(STAMP) $(TEST_STAMP) $(LINT_STAMP)

install-newest: $(NEWEST_STAMP)

demo: install
	$(VENV)/bin/dslaunch --nproc-per-node 4 --master-port 0 --mesh dp=2,tp=2 examples/train.py --steps 8

lint: $(LINT_STAMP)
	$(VENV)/bin/ruff check dslaunch tests bench testbeds
	$(VENV)/bin/ruff format --check dslaunch tests bench examples testbeds
	$(VENV)/bin/mypy dslaunch

# The whole suite on the lowest torch, then on the newest the tests of dslaunch's own use of torch's API
# (-m torch_api). The third-party frameworks under dslaunch (DeepSpeed's engine, Lightning, accelerate, Megatron:
# -m frameworks) run on the lowest torch only: on the newest they were 6 of that pass's 32 tests and over half its
# time, testing those frameworks' own torch support; `make test-frameworks-newest` runs them there.
#
# The two passes run at once: the newest's 26 torch tests in one process beside the whole suite's three workers,
# which spend most of their time waiting on processes, so the two cores are kept busy (in sequence they took
# 513 s + 142 s). Its output is printed after the suite's; either failing fails `make test`.
NEWEST_TESTS := -m "torch_api and not frameworks"
test: $(TEST_STAMP) install-newest
	@log=$$(mktemp); \
	$(NEWEST_PY) -m pytest -q --durations=10 $(NEWEST_TESTS) > "$$log" 2>&1 & newest=$$!; \
	echo '$(PY) -m pytest -q $(WORKERS) --durations=15  (and $(NEWEST_PY) -m pytest $(NEWEST_TESTS) beside it)'; \
	$(PY) -m pytest -q $(WORKERS) --durations=15; lowest=$$?; \
	wait $$newest; newest=$$?; \
	echo '--- the newest torch ($(NEWEST)): $(NEWEST_TESTS)'; cat "$$log"; rm -f "$$log"; \
	[ $$lowest -eq 0 ] && [ $$newest -eq 0 ]

test-frameworks-newest: $(TEST_STAMP) install-newest
	$(NEWEST_PY) -m pytest -q $(WORKERS) --durations=10 -m "torch_api and frameworks"

test-fast: $(TEST_STAMP)
	$(PYTEST_ENV) $(PY) -m pytest -q -m "$(FAST)"

# Every test that starts torch ranks, with --preload torch forced on (docs/preload.md); not part of `make test`.
test-preload: $(TEST_STAMP)
	DSLAUNCH_PRELOAD=torch $(PY) -m pytest -q -m torch

bench: install
	$(PY) bench/bench_launch.py

# The sdist and the wheel as users get them: built, checked by twine and check-wheel-contents, the wheel installed
# (not editable) into a fresh venv and run from there (scripts/check-wheel.sh says how; .ci/run runs it).
check-wheel:
	TORCH='$(TORCH)' bash scripts/check-wheel.sh

clean:
	rm -rf $(VENV) $(NEWEST) .venv-packaging .venv-torch-base build dist *.egg-info .pytest_cache
