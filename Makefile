# Every target does its own set-up: a fresh machine needs only Python 3.
PYTHON ?= python3
VENV := .venv
VENV_TFA := .venv-tf215
PY := $(VENV)/bin/python
PY_TFA := $(VENV_TFA)/bin/python
# The default stack: the newest TensorFlow with tf-keras of the same minor version.
DEFAULT_STACK := "tensorflow==2.21.*" "tf-keras==2.21.*"
# The stack where TensorFlow Addons still runs (built-in Keras 2.15).
TFA_STACK := "tensorflow-cpu==2.15.1" "tensorflow-addons==0.23.0"
PYTEST_FLAGS ?= -n 2 --dist loadgroup

export TF_CPP_MIN_LOG_LEVEL := 2
export PYTHONHASHSEED := 0
export NO_MKDOCS_2_WARNING := 1

.PHONY: help venv venv-tfa lint test test-default test-tf215 docs notebooks demo bench clean

help:
	@echo "make demo   train a model on scikit-learn's digits with this library's optimizers"
	@echo "make test   lint, tests on both stacks, TFA parity, notebooks, strict docs build"
	@echo "make bench  benchmarks against the built-in/TFA optimizers, printed as ratios"

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q $(DEFAULT_STACK)
	$(VENV)/bin/pip install -q -e ".[test,docs,examples]"
	touch $@

$(VENV_TFA)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV_TFA)
	$(VENV_TFA)/bin/pip install -q --upgrade pip
	$(VENV_TFA)/bin/pip install -q $(TFA_STACK) numpy pytest pytest-xdist hypothesis h5py
	$(VENV_TFA)/bin/pip install -q --no-deps -e .
	touch $@

venv: $(VENV)/.installed
venv-tfa: $(VENV_TFA)/.installed

lint: venv
	$(VENV)/bin/ruff check optimizers slots tests benchmarks examples

# Both stacks run the whole suite, except: tests marked `tfa` (live TensorFlow
# Addons parity) run only on TF 2.15, where TFA imports; tests marked
# `default_stack_only` (docs, notebooks, demo, TFA-free migration, Keras 3
# errors) only on the default stack.
test-default: venv
	$(PY) -m pytest $(PYTEST_FLAGS) tests optimizers slots -m "not tfa"

test-tf215: venv-tfa
	$(PY_TFA) -m pytest $(PYTEST_FLAGS) -p no:cacheprovider tests optimizers slots -m "not default_stack_only"

docs: venv
	$(VENV)/bin/mkdocs build --strict --site-dir site

test: lint docs test-default test-tf215
	@echo "make test: all checks passed"

demo: venv
	$(PY) examples/demo.py

bench: venv venv-tfa
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(VENV_TFA) site demo_output bench_output
