# Two commands on a fresh machine (Python 3.11; PYTHON=python3.12 VENV=.venv312 for 3.12): each installs
# what is missing, then runs.
#   make demo   the main job: the lag sweep on Hopper-v4, PPO-Clip and VACO at B = 1, 8, 32 (runs/lag_sweep_demo/)
#   make test   the test suite (what CI runs)
#   make test-fast  the unit tests only (no MJX compile, no long training): the loop while editing
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-fast install

install: $(VENV)/.installed

# Re-installed whenever the pins change; pip installs exactly the locked versions.
$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -c requirements.lock -e '.[dev]'
	touch $@

demo: install
	$(PY) experiments/lag_sweep.py

test: install
	$(PY) -m pytest -n 2 --dist worksteal -q --durations=25

test-fast: install
	$(PY) -m pytest -n 2 --dist worksteal -q -m "not slow and not multiprocess"
