# gpubench: the two commands are `make run` and `make test` (see README.md).
#   make run    [PROFILE=full|quick] [ENVS=cpu,gpu,jax-cpu,jax-gpu,torch-cpu,torch-gpu] [GPU=1]
#                                        set up what is missing, run everything, write the report
#   make quick                           the same with the quick profile
#   make test   [JOBS=2]                 set up the TensorFlow, JAX and PyTorch CPU envs, then lint and
#                                        the whole test suite
#   make check  [JOBS=2]                 the fast unit tests (no notebook runs, no training)
#   make lint                            ruff, as configured in pyproject.toml
#   make nbval                           the stored notebooks checked by nbval (lax, quick profile),
#                                        in the reading order; records and report in .nbval/
#   make setup  [GPU=1] [BACKENDS=tensorflow,jax,torch]
#                                        create the envs (conda, or venvs) and register kernels
#   make lab    [ARGS="--port 8890 --no-browser"]
#                                        JupyterLab on notebooks/ with the env kernels

SHELL := /bin/bash
PYTHON ?= python3
PROFILE ?= full
ENVS ?=
GPU ?=
# Keras backends to set up envs for: tensorflow (the book's), jax, torch, or several.
BACKENDS ?= tensorflow
PYTEST_ARGS ?=
# pytest-xdist workers of make test and make check: one per core of the 2-core machines they
# are sized for. In make test each takes a test file at a time, in the order tests/conftest.py
# gives (the longest first), not xdist's own (the most tests first).
JOBS ?= 2
ARGS ?=

comma := ,
# Naming a JAX or PyTorch env in ENVS sets up that backend's envs too.
with_named = $(if $(and $(findstring $(1),$(ENVS)),$(if $(findstring $(1),$(2)),,x)),$(2)$(comma)$(1),$(2))
SETUP_BACKENDS = $(call with_named,torch,$(call with_named,jax,$(BACKENDS)))

# This checkout's kernels (registered by setup in .jupyter/kernels) come first, ahead of
# the --user ones that another clone's setup may have repointed.
export JUPYTER_PATH := $(CURDIR)/.jupyter$(if $(JUPYTER_PATH),:$(JUPYTER_PATH))

# The Python that drives papermill and pytest: the gpubench-cpu env's (conda or .venv), else
# the JAX CPU env's. Recursively expanded, so it is computed after `setup` has run.
DRIVER = $(shell $(PYTHON) -m gpubench envs --driver)
# The JAX CPU env's Python: the tests marked `jax` run there, with no TensorFlow.
JAX_DRIVER = $(shell $(PYTHON) -m gpubench envs --driver jax-cpu)
# The PyTorch CPU env's Python: the tests marked `torch` run there, with no TensorFlow.
TORCH_DRIVER = $(shell $(PYTHON) -m gpubench envs --driver torch-cpu)

.PHONY: run quick test check lint nbval setup lab

setup:
	$(PYTHON) -m gpubench setup$(if $(GPU), --gpu) --backends $(SETUP_BACKENDS)

run: setup
	$(DRIVER) -m gpubench run --profile $(PROFILE) $(if $(ENVS),--envs $(ENVS))

quick:
	$(MAKE) run PROFILE=quick

# The whole suite runs in the TensorFlow CPU env and also checks the JAX and PyTorch CPU envs.
test: BACKENDS = tensorflow,jax,torch
test: setup
	$(DRIVER) -m ruff check .
	$(DRIVER) -m pytest -m "not jax and not torch" -n $(JOBS) --dist loadfile \
	  --no-loadscope-reorder $(PYTEST_ARGS)
	KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=2 \
	  $(JAX_DRIVER) -m pytest -m jax $(PYTEST_ARGS)
	KERAS_BACKEND=torch $(TORCH_DRIVER) -m pytest -m torch $(PYTEST_ARGS)

check: setup
	$(DRIVER) -m pytest -m "not slow and not jax and not torch" -n $(JOBS) $(PYTEST_ARGS)

lint: setup
	$(DRIVER) -m ruff check .

# The chapters in the reading order (notebooks/README.md), the report last: make nbval runs
# them in this order, so Compare_CPU_GPU reports on the records the chapters before it wrote.
NOTEBOOK_ORDER = performanceTest Mnist_MLP_h1000 Mnist_CNN Keras_Cifar_CNN Speed_Factors \
  Multi_GPU_Scaling Compare_CPU_GPU
# Where make nbval's pass writes its records and its report (git-ignored; its records are
# cleared at the start of each pass).
NBVAL_OUT ?= $(CURDIR)/.nbval

nbval: setup
	mkdir -p "$(NBVAL_OUT)" && rm -f "$(NBVAL_OUT)/results.jsonl"
	GPUBENCH_PROFILE=quick GPUBENCH_RESULTS_PATH="$(NBVAL_OUT)/results.jsonl" \
	  GPUBENCH_RUN_DIRS="$(NBVAL_OUT)" $(DRIVER) -m pytest --nbval-lax \
	  --nbval-sanitize-with notebooks/nbval_sanitize.cfg \
	  $(NOTEBOOK_ORDER:%=notebooks/%.ipynb) $(PYTEST_ARGS)

# Lab's user settings for `make lab`: this checkout's own (git-ignored) folder, where the files
# in lab/user-settings are copied on every start (autosave off, no news pop-up). The user's
# global Lab settings are neither read nor changed.
LAB_SETTINGS_DIR ?= $(CURDIR)/.jupyter/lab/user-settings

lab: setup
	mkdir -p "$(LAB_SETTINGS_DIR)" && cp -R lab/user-settings/. "$(LAB_SETTINGS_DIR)/"
	cd notebooks && JUPYTERLAB_SETTINGS_DIR="$(LAB_SETTINGS_DIR)" \
	  $(DRIVER) -m jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(ARGS)
