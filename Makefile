# Entry points for people and CI. `make test` works from a fresh clone: it creates .venv,
# builds the control-plane binaries into ~/.cache/grpo-operator if missing, and runs pytest.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Two pytest processes side by side: the cluster tests and the rest (hack/run-tests.sh).
PYTEST_WORKERS ?= 2

.PHONY: help venv controlplane prometheus test lint manifests manifests-check run demo bench cluster-up cluster-down

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 20

venv: ## create .venv and install the project with the extras the tests need
	@bash hack/setup-venv.sh

controlplane: ## build the pinned control-plane binaries, Kueue included, into the cache (once)
	@bash hack/build-controlplane.sh >/dev/null
	@bash hack/build-kueue.sh >/dev/null

prometheus: ## build Prometheus and promtool from their Go module into the cache (once)
	@bash hack/build-prometheus.sh >/dev/null

test: venv controlplane prometheus manifests-check ## the whole suite, from a fresh clone
	@PYTHON=$(PY) PYTEST_WORKERS=$(PYTEST_WORKERS) bash hack/run-tests.sh $(PYTEST_ARGS)

manifests: venv ## regenerate crds/, charts/grpo-operator/crds/ and docs/api.md from the models
	$(PY) -m grpo_operator.api.generate

manifests-check: venv ## fail, naming the file, if a generated file differs from the models
	$(PY) -m grpo_operator.api.generate --check

lint: venv controlplane ## ruff, helm lint
	$(PY) -m ruff check operator trainer-image tests hack
	"$$(bash hack/build-controlplane.sh | tail -n1)/bin/helm" lint --strict charts/grpo-operator

run: venv ## run the operator with the current kubeconfig (CRD first: kubectl apply --server-side -f crds/)
	$(PY) -m grpo_operator --liveness http://127.0.0.1:8080/healthz

DEMO ?= run
demo: venv controlplane ## the main job: a real GRPO run on a local cluster (DEMO=recovery: kill its driver)
	@PYTHONPATH=hack $(PY) -m demo --mode $(DEMO)

BENCH_ARGS ?=
bench: venv controlplane ## benchmarks against peers, into docs/benchmarks.md (BENCH_ARGS="--only operator --runs 50")
	@PYTHONPATH=hack $(PY) -m bench $(BENCH_ARGS)

cluster-up: venv controlplane ## start the local cluster in the background (.cluster/kubeconfig)
	@PYTHONPATH=hack $(PY) -m localcluster up

cluster-down: ## stop the local cluster
	@PYTHONPATH=hack $(PY) -m localcluster down
