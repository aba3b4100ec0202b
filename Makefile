# gpubench: the two commands are `make run` and `make test` (see README.md).
#   make run    [PROFILE=full|quick] [ENVS=cpu,gpu] [GPU=1]   set up what is missing, run everything, write the report
#   make quick                                                the same with the quick profile
#   make test                                                 set up what is missing, then the whole test suite
#   make setup  [GPU=1]                                       create the envs (conda, or a .venv) and register kernels
#   make lab                                                  JupyterLab on notebooks/ with the env kernels

SHELL := /bin/bash
PYTHON ?= python3
PROFILE ?= full
ENVS ?=
GPU ?=
PYTEST_ARGS ?=

# This checkout's kernels (registered by setup in .jupyter/kernels) come first, ahead of
# the --user ones that another clone's setup may have repointed.
export JUPYTER_PATH := $(CURDIR)/.jupyter$(if $(JUPYTER_PATH),:$(JUPYTER_PATH))

# The Python that drives papermill and pytest: the gpubench-cpu conda env, else .venv.
# Recursively expanded, so it is computed after `setup` has run.
DRIVER = $(shell $(PYTHON) -m gpubench envs --driver)

.PHONY: run quick test setup lab

setup:
	$(PYTHON) -m gpubench setup $(if $(GPU),--gpu)

run: setup
	$(DRIVER) -m gpubench run --profile $(PROFILE) $(if $(ENVS),--envs $(ENVS))

quick:
	$(MAKE) run PROFILE=quick

test: setup
	$(DRIVER) -m pytest $(PYTEST_ARGS)

lab: setup
	cd notebooks && $(DRIVER) -m jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root)
