# Two commands on a fresh machine: `make demo` and `make test` (each sets up first).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_ARGS ?= --quick
PYTEST_ARGS ?=
# Test processes (pytest-xdist; whole files per process, so module fixtures are built once). Two
# keep both cores busy: one process leaves one idle most of the time.
PYTEST_WORKERS ?= 2

# python3.10: $(PYTHON310) if given, else the first interpreter that really runs (a pyenv shim
# may exist without a 3.10 selected).
FIND_PY310 = for p in "$(PYTHON310)" python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10 \
	/usr/local/bin/python3.10 /usr/bin/python3.10; do \
	  [ -n "$$p" ] && "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null \
	  && { command -v "$$p" || echo "$$p"; } && break; done

# python3.11 for the core venv (the newest TensorFlow, the core install only): the Python for
# which a CPU build of torch is at hand (TORCH_CPU_WHEELS), so Keras 3's three backends are
# tested there (tests/core/test_keras_backends.py).
FIND_PY311 = for p in "$(PYTHON311)" python3.11 $$HOME/.pyenv/versions/3.11*/bin/python3.11 \
	/usr/local/bin/python3.11 /usr/bin/python3.11; do \
	  [ -n "$$p" ] && "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
	  && { command -v "$$p" || echo "$$p"; } && break; done
# PyPI's torch for Linux is a CUDA build of several GB; its CPU build (one wheel, 190 MB) is taken
# from this folder, where present (else Keras's torch backend is not tested: the test says so).
export TORCH_CPU_WHEELS ?= /opt/wheels
TORCH_CPU := torch==2.13.0+cpu
CORE_VENV := .venv-core
CORE_PY := $(CORE_VENV)/bin/python
WHEEL_DIR := build/wheel
# The folders of the tests marked `core` (tests/conftest.py); the others import Beam or TFX.
CORE_TESTS := tests/inputs tests/class_balanced tests/core tests/docs
CORE_PYTEST = $(CORE_PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m core $(PYTEST_ARGS) \
  $(CORE_TESTS)
CORE_VENV_LOG := build/core-venv.log

# The task image, built locally with podman (`make image`; docs/kubeflow.md): its base from
# Debian's packages and a Python 3.10 (kubeflow/build_base_image.sh), uv from this venv, and the
# lock's wheels from the host's uv cache where it has one (the build then needs no PyPI).
IMAGE ?= tfx-dynamic-inputs:local
BASE_IMAGE ?= tfx-dynamic-inputs-base:bookworm-py3.10
UV_IMAGE ?= tfx-dynamic-inputs-uv:local
UV_CACHE ?= $(HOME)/.cache/uv
# crun refuses the hybrid cgroups of our machines.
PODMAN_RUNTIME ?= runc

.PHONY: help setup demo test test-core core-venv grain-venv test-grain lint bench kubeflow image image-tasks lock clean

help:
	@echo "make demo      set up, then run both pipelines on the bundled sample data"
	@echo "make test      set up, then run the test suite, then make test-core and make test-grain"
	@echo "make test-core build the wheel, install it with the newest TensorFlow in a Python 3.11"
	@echo "               venv (.venv-core), run the README quickstart and the library's tests there"
	@echo "make core-venv build .venv-core alone (the wheel, TensorFlow 2.21, JAX and torch for"
	@echo "               Keras's other backends, its native ops)"
	@echo "make test-grain build .venv-grain (Python 3.11: the wheel's grain extra, Keras 3, JAX and"
	@echo "               torch, no TensorFlow) and run tests/grain there"
	@echo "make setup     create .venv (python3.10) from requirements.lock, build the native op (idempotent)"
	@echo "make lint      ruff"
	@echo "make bench     run every benchmark under bench/ (BENCH_ARGS=$(BENCH_ARGS)); its peers in $(PEERS_VENV)"
	@echo "make kubeflow  compile both pipelines under kubeflow/: the .yaml to upload to KFP, the .json for Vertex AI"
	@echo "make image     build the task image $(IMAGE) with podman, on a local Debian base"
	@echo "make image-tasks  run every compiled task of both pipelines in $(IMAGE), no network"
	@echo "make lock      regenerate requirements.lock from pyproject.toml (needs uv)"

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml setup.py $(wildcard components/native/*.cc components/native/*.h)
	@py=$$($(FIND_PY310) | head -n 1); \
	if [ -z "$$py" ]; then \
	  echo "error: python3.10 not found. TFX 1.16 needs Python 3.10: install it (e.g. 'pyenv install 3.10') or pass PYTHON310=/path/to/python3.10." >&2; \
	  exit 1; fi; \
	if [ ! -x $(PY) ] || ! $(PY) -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then \
	  echo "creating $(VENV) with $$py"; rm -rf $(VENV); "$$py" -m venv $(VENV); fi
	$(PY) -m pip install --quiet --disable-pip-version-check "uv>=0.4"
	@# Bytecode now: where PYTHONDONTWRITEBYTECODE is set (as on our CI machines) every interpreter,
	@# each Beam worker process included, would otherwise recompile ~2,400 modules on every start.
	$(VENV)/bin/uv pip sync --compile-bytecode --python $(PY) requirements.lock
	$(VENV)/bin/uv pip install --python $(PY) --no-deps -e .
	$(PY) -m tfx_dynamic_inputs.native
	@touch $(STAMP)

demo: setup
	$(PY) -m tfx_dynamic_inputs.pipeline.demo

# The `image` tests run the tasks in the built image (minutes): `make image-tasks`. The `core`
# tests run in test-core, on the newest TensorFlow; here only those also marked `full` (they need
# an extra, or check the library on TensorFlow 2.16: tests/conftest.py). The core venv is built
# while the first run goes (its log printed after): its install and native build then take
# time the first run leaves idle instead of their own minute.
test: setup
	@mkdir -p build; $(MAKE) --no-print-directory core-venv > $(CORE_VENV_LOG) 2>&1 & core_venv=$$!; \
	$(MAKE) --no-print-directory grain-venv > $(GRAIN_VENV_LOG) 2>&1 & grain_venv=$$!; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not image and (not core or full)" \
	  --ignore=tests/grain $(PYTEST_ARGS); main=$$?; \
	wait $$core_venv; built=$$?; echo "== make core-venv (built alongside)"; cat $(CORE_VENV_LOG); \
	wait $$grain_venv; grain_built=$$?; echo "== make grain-venv (built alongside)"; \
	cat $(GRAIN_VENV_LOG); [ $$main -eq 0 ] && [ $$built -eq 0 ] && [ $$grain_built -eq 0 ]
	$(CORE_PYTEST)
	$(GRAIN_PYTEST)

# The core install where its users are: the wheel in a clean venv with TensorFlow 2.21 and no
# Beam or TFX, then the tests marked `core` (tests/conftest.py), among them the README's
# quickstart and the other `core` blocks, each run from an empty folder (so the wheel is what
# they import: tests/docs/test_snippets.py). Bytecode at install, as in setup: where
# PYTHONDONTWRITEBYTECODE is set (our CI machines), each of the run's TensorFlow processes would
# otherwise compile TensorFlow's modules again (`import tensorflow` 12 s instead of 3.5 s).
core-venv: setup
	@py=$$($(FIND_PY311) | head -n 1); \
	if [ -z "$$py" ]; then \
	  echo "error: python3.11 not found: install it (e.g. 'pyenv install 3.11') or pass PYTHON311=/path/to/python3.11." >&2; \
	  exit 1; fi; \
	set -e; rm -rf $(WHEEL_DIR) $(CORE_VENV); \
	$(VENV)/bin/uv build --quiet --wheel --out-dir $(WHEEL_DIR) .; \
	$(VENV)/bin/uv venv --quiet --python "$$py" $(CORE_VENV); \
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(CORE_PY) $(WHEEL_DIR)/*.whl \
	  -r tests/core/requirements.txt
	@# torch without bytecode: one test process imports it (4 s more), compiling its 5,000 modules
	@# here would take 15 s of CPU.
	@if ls $(TORCH_CPU_WHEELS)/torch-2.13.0+cpu-cp311-*.whl >/dev/null 2>&1; then \
	  $(VENV)/bin/uv pip install --quiet --python $(CORE_PY) --find-links $(TORCH_CPU_WHEELS) \
	    "$(TORCH_CPU)" -c tests/core/requirements.txt; \
	else echo "note: no $(TORCH_CPU) wheel in $(TORCH_CPU_WHEELS): Keras's torch backend goes untested"; fi
	@# Its native ops now, once (from /, so the wheel is what it imports): the tests' processes
	@# would otherwise each build them at first use. Their first-use build has a test of its own.
	cd / && $(abspath $(CORE_PY)) -m tfx_dynamic_inputs.native

test-core: core-venv
	$(CORE_PYTEST)

# The Grain install where its users are: the wheel (--no-deps: its core dependencies name
# TensorFlow) with its grain extra, Keras 3, JAX and torch's CPU build, and no TensorFlow (a
# test checks that `import tensorflow` fails there). tests/grain runs there alone; its equality
# tests ask the full install's interpreter ($(PY), TensorFlow 2.16) for the tf.data batches.
GRAIN_VENV := .venv-grain
GRAIN_PY := $(GRAIN_VENV)/bin/python
GRAIN_WHEEL_DIR := build/grain-wheel
GRAIN_VENV_LOG := build/grain-venv.log
GRAIN_PYTEST = TFX_DYNAMIC_INPUTS_TF_PYTHON=$(abspath $(PY)) $(GRAIN_PY) -m pytest \
  -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS) tests/grain

grain-venv: setup
	@py=$$($(FIND_PY311) | head -n 1); \
	if [ -z "$$py" ]; then \
	  echo "error: python3.11 not found: install it (e.g. 'pyenv install 3.11') or pass PYTHON311=/path/to/python3.11." >&2; \
	  exit 1; fi; \
	set -e; rm -rf $(GRAIN_WHEEL_DIR) $(GRAIN_VENV); \
	$(VENV)/bin/uv build --quiet --wheel --out-dir $(GRAIN_WHEEL_DIR) .; \
	$(VENV)/bin/uv venv --quiet --python "$$py" $(GRAIN_VENV); \
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(GRAIN_PY) \
	  -r tests/grain/requirements.txt; \
	$(VENV)/bin/uv pip install --quiet --no-deps --python $(GRAIN_PY) $(GRAIN_WHEEL_DIR)/*.whl
	@if ls $(TORCH_CPU_WHEELS)/torch-2.13.0+cpu-cp311-*.whl >/dev/null 2>&1; then \
	  $(VENV)/bin/uv pip install --quiet --python $(GRAIN_PY) --find-links $(TORCH_CPU_WHEELS) \
	    "$(TORCH_CPU)" -c tests/grain/requirements.txt; \
	else echo "note: no $(TORCH_CPU) wheel in $(TORCH_CPU_WHEELS): Keras's torch backend goes untested"; fi

test-grain: grain-venv
	$(GRAIN_PYTEST)

lint: setup
	$(VENV)/bin/ruff check .

# The class-balanced bench's peer, tensorflow-similarity, in a venv of its own (it would pull
# another TF stack into ours), installed from the package registry here, never at bench time.
# tensorflow-metadata 1.17+ wants protobuf 5, which TensorFlow 2.16 refuses.
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed

$(PEERS_STAMP): $(STAMP)
	py=$$($(FIND_PY310) | head -n 1); $(VENV)/bin/uv venv -q --python "$$py" $(PEERS_VENV)
	$(VENV)/bin/uv pip install -q --python $(PEERS_VENV)/bin/python "tensorflow==2.16.2" \
	  "tensorflow-similarity==0.17.1" "tensorflow-metadata<1.17"
	@touch $@

bench: setup $(PEERS_STAMP)
	@set -e; for script in bench/bench_*.py; do \
	  echo "== $$script"; TFSIM_PYTHON=$(PEERS_VENV)/bin/python $(PY) $$script $(BENCH_ARGS); done

# The checkout keeps its specs beside the code (kubeflow/*.json, ignored by git); elsewhere the
# command writes them below the current folder (tfx-dynamic-inputs-out/kubeflow).
kubeflow: setup
	$(PY) -m tfx_dynamic_inputs.kubeflow.runner --output-dir kubeflow

image: setup
	kubeflow/build_base_image.sh $(BASE_IMAGE)
	@# uv's own images are on ghcr.io; this venv's uv binary, as a one-file image, stands in.
	podman image exists $(UV_IMAGE) || tar -C $(VENV)/bin -c uv | podman import - $(UV_IMAGE)
	@# The cache is an overlay (`O`): what the build writes to it stays in the build.
	offline=; [ -d "$(UV_CACHE)" ] && offline="--build-arg UV_OFFLINE=1 -v $(UV_CACHE):/root/.cache/uv:O"; \
	podman build --runtime $(PODMAN_RUNTIME) -f kubeflow/Dockerfile --build-arg BASE_IMAGE=$(BASE_IMAGE) \
	  --build-arg UV_IMAGE=$(UV_IMAGE) $$offline -t $(IMAGE) .
	podman image ls $(IMAGE)

# The `image` tests: both demos' tasks (a line each and the summary: -s), then the standard
# pipeline on user modules. `python -m tfx_dynamic_inputs.kubeflow.image_tasks` runs the demos alone.
image-tasks: setup
	TFX_DYNAMIC_INPUTS_IMAGE=$(IMAGE) $(PY) -m pytest -s -m image $(PYTEST_ARGS) tests/kubeflow/test_image_tasks.py

lock:
	uv pip compile pyproject.toml --extra kubeflow --extra dev --python-version 3.10 \
	  --python-platform x86_64-unknown-linux-gnu -o requirements.lock

clean:
	rm -rf $(VENV) $(CORE_VENV) $(WHEEL_DIR) $(GRAIN_VENV) $(GRAIN_WHEEL_DIR) .pytest_cache .ruff_cache
