# Everything a fresh machine needs (Python 3.11+, Go 1.26+, PyPI and the Go module proxy) is set up
# by these targets; `make run` and `make test` are the two entry points.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WORKERS ?= 2
PYTEST_ARGS ?=
KIND_CLUSTER ?= envtest
export GOTOOLCHAIN ?= local

.PHONY: setup binaries test unit e2e run bench manifests lint kind-image kind-up kind-down e2e-kind kind-smoke kind-deploy kind-deployed-smoke kind-undeploy run-kind deploy clean

# Both distributions editable, and the contributor's dev group (pip >= 25.1 reads [dependency-groups]).
$(VENV)/.installed: pyproject.toml envtest/pyproject.toml operator/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade 'pip>=25.1'
	# kind: the backend's own tests run on the real pytest-kind-ng
	$(PY) -m pip install -q -e './envtest[kind]' -e ./operator --group dev
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

# kind: the binary on PATH, else built once with go at the pinned version; the node image is the pinned
# one (ENVTEST_KIND_IMAGE overrides) when docker has or can pull it, else the offline one built here
# (`make kind-image`, cached by content). dockerd is started when none runs. Versions: `$(PY) -m envtest.pins`.
# On the offline image the operator's images are stand-ins: STANDIN_ENV names them for the E2E run.
NICE ?= nice -n 10
STANDIN_ENV = $$($(PY) -m envtest.binaries.nodeimage env --name $(KIND_CLUSTER))
KIND_SMOKE_TIMEOUT ?= 900
KIND_SMOKE_PATHS ?= tests/e2e

kind-image: $(VENV)/.installed ## the offline kind node image (docker + go; cold ≈ 26 min on 2 cores, cached: 3 s)
	$(NICE) $(PY) -m envtest.binaries.nodeimage build

kind-up: $(VENV)/.installed ## a kind cluster for `pytest --envtest-backend=kind` (dockerd started if needed), reused if running
	$(NICE) $(PY) -m envtest.cli kind up --name $(KIND_CLUSTER) --config kind-config.yaml

kind-down: $(VENV)/.installed ## delete the cluster; fails if a container, network or volume of it is left
	$(PY) -m envtest.cli kind down --name $(KIND_CLUSTER)
	$(PY) hack/kind_leftovers.py --name $(KIND_CLUSTER)

e2e-kind: $(VENV)/.installed ## E2E on kind: reuses `make kind-up`'s cluster, else creates (and deletes) one
	env $(STANDIN_ENV) $(PY) -m pytest tests/e2e -n $(WORKERS) -rs --envtest-backend=kind \
		--envtest-cluster-name=$(KIND_CLUSTER) --junitxml=artifacts/junit-kind.xml $(PYTEST_ARGS)
	$(PY) hack/skipcheck.py artifacts/junit-kind.xml --max-skipped 0.5

kind-smoke: $(VENV)/.installed ## the CI smoke set on `make kind-up`'s cluster (-m kind_smoke)
	env $(STANDIN_ENV) timeout $(KIND_SMOKE_TIMEOUT) $(PY) -m pytest $(KIND_SMOKE_PATHS) -m kind_smoke -rs \
		--envtest-backend=kind --envtest-cluster-name=$(KIND_CLUSTER) --junitxml=artifacts/junit-kind-smoke.xml \
		$(PYTEST_ARGS)

# In-cluster, as kubebuilder's E2E does it: the image built without a registry (BASE_IMAGE: Debian's
# python3 and a local wheelhouse), `kind load`ed, `make deploy`ed with its RBAC; the stand-ins set.
KUBECTL = $$($(PY) -m envtest.cli binaries path kubectl)
KIND_KUBECONFIG = $$($(PY) -c 'from envtest.kind import kubeconfig_path; print(kubeconfig_path("$(KIND_CLUSTER)"))')
OPERATOR_IMAGE ?= mysql-operator:dev

kind-deploy: kind-up ## the operator's image built here, loaded into kind and deployed with `make deploy`
	base=$$($(PY) -m envtest.binaries.nodeimage pybase .) && \
		$(NICE) docker build -q --build-arg BASE_IMAGE=$$base -f operator/config/Dockerfile -t $(OPERATOR_IMAGE) .
	$$($(PY) -m envtest.cli kind path) load docker-image $(OPERATOR_IMAGE) --name $(KIND_CLUSTER)
	PATH="$$(dirname $(KUBECTL)):$$PATH" KUBECONFIG=$(KIND_KUBECONFIG) $(MAKE) deploy
	e="$(STANDIN_ENV)"; [ -z "$$e" ] || $(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) \
		-n mysql-operator-system set env deploy/mysql-operator $$e
	$(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) -n mysql-operator-system rollout status deploy/mysql-operator --timeout=300s

# No conversion endpoint here: the run would re-point the deployed CRD at this host, and leave it pointing
# at an endpoint that is gone; the deployed operator is tested with the CRD as `make deploy` applied it.
kind-deployed-smoke: $(VENV)/.installed ## the smoke test of `make kind-deploy`'s operator
	$(PY) -m pytest tests/e2e/test_deployed_operator.py -m kind_deployed -rs --envtest-backend=kind \
		--envtest-cluster-name=$(KIND_CLUSTER) -o envtest_conversion_webhook= $(PYTEST_ARGS)

kind-undeploy: $(VENV)/.installed ## remove `make kind-deploy`'s operator (CRD and RBAC stay)
	$(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) delete -f operator/config/manager.yaml --ignore-not-found --wait

run-kind: kind-up ## the operator on the host, attached to the kind cluster, with the sample until Running
	$(PY) hack/run_kind.py --name $(KIND_CLUSTER)

deploy: ## CRD, RBAC and the operator Deployment into the current kubectl context
	kubectl apply -f api/crd/ -f operator/config/rbac.yaml -f operator/config/manager.yaml \
		-f operator/config/leader_election_role.yaml  # after manager.yaml, which makes its namespace

clean:
	$(VENV)/bin/envtest down --all 2>/dev/null || true
	rm -rf $(VENV) artifacts .pytest_cache
