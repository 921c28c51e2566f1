# One entry point for set-up, tests and the local run. Everything installs into the checkout
# (.venv/ and .tools/); nothing is installed globally.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/.tools/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
# podman settings for sandboxed machines such as CI's (scripts/install_containers.sh writes them)
export CONTAINERS_CONF := $(CURDIR)/.tools/containers.conf
export BUILDAH_ISOLATION := chroot
# the stand-ins for the official bases, for machines that reach no registry (CI): python:3.11-slim-bookworm
# (the CPU image's) and tensorflow/tensorflow:2.21.0 (the GPU image's less CUDA, and the BYO example's)
BASE_IMAGE ?= localhost/tf-distributed/python-base:3.11-slim-bookworm
TENSORFLOW_BASE_IMAGE ?= localhost/tf-distributed/tensorflow-base:2.21.0
export TFD_TEST_BASE_IMAGE := $(BASE_IMAGE)
export TFD_TEST_TENSORFLOW_BASE_IMAGE := $(TENSORFLOW_BASE_IMAGE)

.PHONY: setup setup-run test lint docs schema run bench clean base-image

## setup-run: what `make run` needs and nothing more (no root): tfchart + trainer in .venv, and helm
## (the one on PATH, else the pinned helm 4 in .tools)
setup-run:
	@bash scripts/setup_run.sh

## setup: everything `make test` needs: the pinned Python environment with the dev tools, checkov, the
## README generator, helm 3.17 and 4.1, podman & co. and Prometheus (scripts/setup.sh)
setup:
	@bash scripts/setup.sh

## lint: ruff, mypy --strict, and the generated schema must be up to date
lint: setup
	$(VENV)/bin/ruff check tfchart trainer tfdcontract tests scripts bench examples
	$(VENV)/bin/mypy
	MYPYPATH=bench $(VENV)/bin/mypy bench/*.py
	$(PY) scripts/gen_schema.py --check

## base-image: local stand-ins for python:3.11-slim-bookworm (debootstrap) and tensorflow/tensorflow:2.21.0
## (+ pip install tensorflow), for machines that reach no container registry; the image tests build
## Dockerfile.cpu on the first, Dockerfile.gpu and the bring-your-own example on the second
base-image: setup
	BASE_IMAGE=$(BASE_IMAGE) TENSORFLOW_BASE_IMAGE=$(TENSORFLOW_BASE_IMAGE) bash scripts/build_base_image.sh python tensorflow

## test: everything CI runs (the README's test command; .ci/run calls exactly this)
test: lint base-image
	$(PY) -m pytest

## docs: regenerate values.schema.json and the parameter table of charts/tf-distributed/README.md
## (the only copy of it: the top-level README.md links there) from values.yaml
docs: setup
	$(PY) scripts/gen_schema.py
	.tools/node/node_modules/.bin/readme-generator --values charts/tf-distributed/values.yaml --readme charts/tf-distributed/README.md
	$(PY) scripts/compact_tables.py charts/tf-distributed/README.md

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache

## run: the README's first command: the default CPU topology (1 ps, 2 workers, chief, TensorBoard)
## as local processes, trained on the offline digits set. ARGS passes more tfchart options.
run: setup-run
	$(VENV)/bin/tfchart local -f values/cpu.yaml --set training.dataset=digits --set training.download=false $(ARGS)

## bench: every benchmark this machine can run (B1-B8), side by side; updates bench/RESULTS.md
bench: setup
	$(PY) bench/run.py $(ARGS)
