# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dslaunch-installed

.PHONY: demo test install bench clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	$(PY) -m compileall -q dslaunch  # bytecode even where PYTHONDONTWRITEBYTECODE is set: every rank imports it
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/dslaunch --nproc-per-node 4 --master-port 0 --mesh dp=2,tp=2 examples/train.py --steps 8

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) bench/bench_launch.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
