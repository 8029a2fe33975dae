# Everything a fresh machine needs (Python 3.11+, Go 1.26+, PyPI and the Go module proxy) is set up
# by these targets; `make run` and `make test` are the two entry points.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WORKERS ?= 2
PYTEST_ARGS ?=
KIND_CLUSTER ?= envtest
export GOTOOLCHAIN ?= local

.PHONY: setup binaries test unit e2e run bench manifests lint kind-up kind-down deploy clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed binaries ## Python environment + control-plane binaries (built with go when not downloadable)

binaries: $(VENV)/.installed
	$(VENV)/bin/envtest binaries install

test: setup ## unit + e2e (local control plane), in parallel
	$(PY) -m pytest tests -n $(WORKERS) $(PYTEST_ARGS)

unit: $(VENV)/.installed
	$(PY) -m pytest tests/unit -n $(WORKERS) $(PYTEST_ARGS)

e2e: setup
	$(PY) -m pytest tests/e2e -n $(WORKERS) $(PYTEST_ARGS)

run: setup ## local control plane + CRD + operator + sample until Running; Ctrl-C stops everything
	$(PY) hack/run.py

bench: setup
	$(PY) benchmarks/run.py

manifests: $(VENV)/.installed ## regenerate api/crd and operator/config/rbac.yaml from the pydantic models
	$(PY) -m mysql_operator.manifests

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mysql_operator.manifests --check
	GOBIN=$(CURDIR)/$(VENV)/bin go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
	$(VENV)/bin/actionlint

kind-up: ## a kind cluster for `pytest --envtest-backend=kind` (needs docker and kind)
	kind create cluster --name $(KIND_CLUSTER) --config kind-config.yaml

kind-down:
	kind delete cluster --name $(KIND_CLUSTER)

deploy: ## CRD, RBAC and the operator Deployment into the current kubectl context
	kubectl apply -f api/crd/ -f operator/config/rbac.yaml -f operator/config/manager.yaml

clean:
	$(VENV)/bin/envtest down --all 2>/dev/null || true
	rm -rf $(VENV) artifacts .pytest_cache
