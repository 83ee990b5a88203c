# gpuctl — the developer entry points. Everything a run needs is installed from here.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The control plane the integration tests and `make cluster` run, by name (hack/cluster/matrix) or by versions:
#   make test CLUSTER=floor      make test K8S=1.36.3 KUEUE=0.19.2      (default: primary)
CLUSTER ?=
K8S ?=
KUEUE ?=
export GPUCTL_CLUSTER := $(or $(GPUCTL_CLUSTER),$(CLUSTER))
export GPUCTL_K8S := $(or $(GPUCTL_K8S),$(K8S))
export GPUCTL_KUEUE := $(or $(GPUCTL_KUEUE),$(KUEUE))

.PHONY: help demo test test-matrix test-floor unit lint bench bench-scale venv clean testbin image image-test docs cluster cluster-down dist

$(STAMP): pyproject.toml
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@# pip 25.1 and later read the dependency groups of pyproject.toml (--group).
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e . --group test --group lint
	@# An editable install leaves the man pages out: `man gpuctl` finds them here once $(BIN) is on PATH.
	@mkdir -p $(VENV)/share/man && ln -sfn "$(CURDIR)/man" $(VENV)/share/man/man1
	@touch $(STAMP)

## venv: the virtual environment (.venv) with gpuctl installed editable and the test and lint tools
venv: $(STAMP)

## help: list these targets
help:
	@sed -n 's/^## \([a-z-]*\): /\1\t/p' $(MAKEFILE_LIST) | awk -F '\t' '{ printf "  %-12s %s\n", $$1, $$2 }'

DEMO_VENV ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

# Installed, not linked to the checkout: installed again when a source it was built from changes.
$(DEMO_STAMP): pyproject.toml setup.py $(shell find gpuctl -name '*.py') $(wildcard man/*.1)
	@$(PYTHON) -m venv $(DEMO_VENV)
	@# gpuctl and what it runs, nothing else: no test or lint tools.
	@$(DEMO_VENV)/bin/python -m pip install --quiet --disable-pip-version-check .
	@touch $(DEMO_STAMP)

## demo: install gpuctl alone (its runtime dependencies) into .venv-demo and show the views of the example snapshot
demo: $(DEMO_STAMP)
	@$(DEMO_VENV)/bin/gpuctl views --snapshot examples/snapshot

## lint: ruff on every Python package here, mypy --strict on gpuctl/
lint: $(STAMP)
	$(BIN)/ruff check gpuctl testbed tests bench hack setup.py
	$(BIN)/ruff format --check gpuctl testbed tests bench hack setup.py
	$(BIN)/mypy

## testbin: build the control plane (etcd, kube-apiserver, Kueue) and Prometheus from Go modules into a cache outside the repo
testbin:
	@if command -v go >/dev/null 2>&1; then hack/cluster/build.sh >/dev/null && hack/cluster/build.sh prometheus >/dev/null; \
	else echo "testbin: go not found; integration tests will say so" >&2; fi

## test: lint, then every test suite (unit, CLI, integration on a real control plane)
test: lint testbin
	$(BIN)/python -m pytest -q tests

## test-matrix: the integration suite on every tested control plane (floor, primary, edge, primary-v1beta2)
test-matrix: $(STAMP)
	@set -e; for c in $$(hack/cluster/build.sh --list); do \
	  echo "== test-matrix: $$c"; \
	  GPUCTL_CLUSTER=$$c GPUCTL_K8S= GPUCTL_KUEUE= hack/cluster/build.sh >/dev/null; \
	  GPUCTL_CLUSTER=$$c GPUCTL_K8S= GPUCTL_KUEUE= $(BIN)/python -m pytest -q tests/integration; \
	done

## test-floor: the integration tests whose answers depend on Kueue's version, on the floor (Kubernetes 1.35 + Kueue 0.17)
test-floor: $(STAMP)
	GPUCTL_CLUSTER=floor GPUCTL_K8S= GPUCTL_KUEUE= hack/cluster/build.sh >/dev/null
	GPUCTL_CLUSTER=floor GPUCTL_K8S= GPUCTL_KUEUE= $(BIN)/python -m pytest -q $(FLOOR_TESTS)

FLOOR_TESTS := tests/integration/test_whatif_differential.py \
	tests/integration/test_operator.py::test_two_instancetypes_over_one_nodes_cards_hold_each_other \
	tests/integration/test_kueue_api_versions.py tests/integration/test_controlplane.py \
	tests/integration/test_tas_loop.py

## unit: the fast suites only
unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/cli

## image: the operator image as an OCI archive in build/image, built without a Docker engine (needs root)
image: $(STAMP)
	hack/image/build.sh build/image

## image-test: build the image, then start its entrypoint from the unpacked rootfs: --help and a health check
image-test: image
	hack/image/check.sh build/image

## docs: regenerate the man pages, completions, start-up table and deploy manifests from the code
docs: $(STAMP)
	$(BIN)/python -m gpuctl.cli.docgen .
	$(BIN)/python -m gpuctl.operator.manifests deploy

## cluster: a real local control plane (etcd, kube-apiserver, Kueue, the operator) with the example pools loaded
cluster: $(STAMP)
	@$(BIN)/python -m hack.cluster.local up

## cluster-down: stop it and remove its files
cluster-down: $(STAMP)
	@$(BIN)/python -m hack.cluster.local down

## dist: the kubectl plugin as a krew archive (dist/gpuctl-v<version>.tar.gz) and its manifest (dist/gpuctl.yaml)
dist: $(STAMP)
	$(BIN)/python -m hack.dist $(if $(RELEASE_URL),--release-url $(RELEASE_URL))

## bench: measure against reference runs and write docs/benchmarks.md
bench: $(STAMP)
	$(BIN)/python -m bench.run --write docs/benchmarks.md

## bench-scale: the operator on the real control plane with pools of 5,000 and 20,000 nodes (not in CI; ~1.5 h)
bench-scale: $(STAMP) testbin
	$(BIN)/python -m bench.scale --write docs/benchmarks.md

## clean: remove the virtual environment and what the builds and the tools wrote
clean:
	rm -rf $(VENV) $(DEMO_VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis
