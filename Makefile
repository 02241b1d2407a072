# Two commands on a fresh machine (Python 3.11; PYTHON=python3.12 VENV=.venv312 for 3.12): each installs
# what is missing, then runs.
#   make demo   the main job: the lag sweep on Hopper-v4, PPO-Clip and VACO at B = 1, 8, 32 (runs/lag_sweep_demo/);
#               installs the package alone (no test, notebook or tracking tools)
#   make test   the test suite (what CI runs); installs the package with its `dev` extra
#   make test-fast  the unit tests only (no MJX compile, no long training): the loop while editing
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# uv installs the same locked versions as pip, several times faster (BENCHMARKS.md, "CI time")
UV_VERSION := 0.13.10
UV := $(VENV)/bin/uv

.PHONY: demo test test-fast install install-core

install: $(VENV)/.installed
install-core: $(VENV)/.installed-core

$(UV):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q uv==$(UV_VERSION)

# Re-installed whenever the pins change; exactly the locked versions (requirements.lock as constraints).
$(VENV)/.installed-core: pyproject.toml requirements.lock | $(UV)
	$(UV) pip install --python $(PY) -q -c requirements.lock -e .
	touch $@

$(VENV)/.installed: pyproject.toml requirements.lock | $(UV)
	$(UV) pip install --python $(PY) -q -c requirements.lock -e '.[dev]'
	touch $@ $(VENV)/.installed-core

demo: install-core
	$(PY) experiments/lag_sweep.py

test: install
	$(PY) -m pytest -n 2 --dist worksteal -q --durations=25

test-fast: install
	$(PY) -m pytest -n 2 --dist worksteal -q -m "not slow and not multiprocess"
