# Everything a fresh machine needs (Python 3.11+, Go 1.26+, PyPI and the Go module proxy) is set up
# by these targets; `make run` and `make test` are the two entry points.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WORKERS ?= 2
# `make test` (unit and E2E in one session): E2E tests spend much of their time waiting on the apiserver
# and the operator, so a third worker on 2 cores uses the core they leave idle
# (benchmarks/bench_make_test.py).
TEST_WORKERS ?= 3
# xdist's default scheduler hands each worker a run of consecutive tests first: in `make test` one worker's
# first run held every E2E test and ran them alone while the other finished the unit tests and waited.
# worksteal lets an idle worker take half of a busy one's queue.
PYTEST_DIST ?= worksteal
PYTEST_ARGS ?=
KIND_CLUSTER ?= envtest
export GOTOOLCHAIN ?= local

.PHONY: script-shells shells setup binaries test unit e2e test-versions durations run bench manifests lint docs docs-serve dist kind-host kind-image kind-up kind-standins kind-down e2e-kind kind-smoke kind-deploy kind-deployed-smoke kind-undeploy run-kind deploy clean

# Both distributions editable, and the contributor's dev group (pip >= 25.1 reads [dependency-groups]).
$(VENV)/.installed: pyproject.toml envtest/pyproject.toml operator/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade 'pip>=25.1'
	# kind: the backend's own tests run on the real pytest-kind-ng
	$(PY) -m pip install -q -e './envtest[kind]' -e ./operator --group dev
	touch $@

setup: $(VENV)/.installed binaries ## Python environment + control-plane binaries (built with go when not downloadable)

# The unit tests run the pod scripts under both shells. Where this machine has either missing from PATH,
# its Debian package is downloaded (apt-get download: nothing installed) and the binary copied into the
# virtualenv; nothing outside $(VENV) changes. Only the targets running the unit tests need them.
shells: $(VENV)/.installed ## dash and busybox into $(VENV)/bin when not on PATH (Debian packages, not installed)
	$(PY) hack/script_shells.py $(VENV)/bin

# The shells the database and backup pods run their scripts with (dash: Debian's and Ubuntu's /bin/sh;
# busybox: the backup image's): the unit tests run every script under both and fail naming this target.
script-shells: ## dash and busybox on this machine (apt-get; changes the host)
	command -v dash >/dev/null && command -v busybox >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q dash busybox; }

binaries: $(VENV)/.installed
	$(VENV)/bin/envtest binaries install

# A skip is a test that proved nothing: `make test` fails on any skip but the documented kind-only ones
# (hack/skipcheck.py KIND_ONLY; docs/ci.md). Every test runs under a time limit (tests/conftest.py).
test: shells setup ## unit + e2e (local control plane), in parallel; fails on a skip that is not kind-only
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist $(PYTEST_DIST) -rs --junitxml=artifacts/junit-test.xml \
		$(PYTEST_ARGS)
	$(PY) hack/skipcheck.py artifacts/junit-test.xml --max-skipped 0 --allow-kind-only

unit: shells
	$(PY) -m pytest tests/unit -n $(WORKERS) $(PYTEST_ARGS)

# Sharding across machines (pytest-split): `make e2e SHARDS=4 SHARD=2` runs group 2 of 4, balanced by the
# durations stored in tests/e2e/.test_durations (`make durations` refreshes them; commit the file). A test
# missing from it counts as the average of the others and still lands in exactly one group.
# least_duration (longest first onto the lightest group) balances a suite with a few long tests far better
# than the default contiguous chunks; every shard starts its own plane either way.
SHARDS ?=
SHARD ?=
DURATIONS ?= tests/e2e/.test_durations
SPLIT_ARGS = $(if $(SHARDS)$(SHARD),$(if $(and $(SHARDS),$(SHARD)),--splits $(SHARDS) --group $(SHARD) \
	--durations-path $(DURATIONS) --splitting-algorithm least_duration,$(error give both SHARDS and SHARD \
	(make e2e SHARDS=4 SHARD=2))))

e2e: setup ## E2E on the local control plane; SHARDS=N SHARD=i runs one group of N
	$(PY) -m pytest tests/e2e -n $(WORKERS) $(SPLIT_ARGS) $(PYTEST_ARGS)

# Every supported minor in turn (`python -m envtest.pins supported`), each with its own binaries (installed
# or built first, side by side in the cache) and its own plane; one minor's failure does not stop the next,
# and the target fails if any failed. K8S_VERSIONS=1.36 picks some. A cold build is ~20 min per minor.
K8S_VERSIONS ?= $$($(PY) -m envtest.pins supported | tr ',' ' ')
test-versions: $(VENV)/.installed ## the E2E suite (-n $(WORKERS)) on every supported Kubernetes minor
	@failed=; for v in $(K8S_VERSIONS); do \
		echo "== Kubernetes $$v" >&2; \
		$(VENV)/bin/envtest binaries install --k8s-version $$v && \
		ENVTEST_K8S_VERSION=$$v $(PY) -m pytest tests/e2e -n $(WORKERS) \
			--junitxml=artifacts/junit-k8s-$$v.xml $(PYTEST_ARGS) || failed="$$failed $$v"; \
	done; [ -z "$$failed" ] || { echo "test-versions: failed on$$failed" >&2; exit 1; }

# Durations measured the way shards run (-n $(WORKERS)); --clean-durations drops tests that are gone.
durations: setup ## refresh tests/e2e/.test_durations (pytest-split) from a full E2E run
	$(PY) -m pytest tests/e2e -n $(WORKERS) --store-durations --clean-durations --durations-path $(DURATIONS) \
		$(PYTEST_ARGS)

run: setup ## local control plane + CRD + operator + sample until Running; Ctrl-C stops everything
	$(PY) hack/run.py

bench: setup
	$(PY) benchmarks/run.py

manifests: $(VENV)/.installed ## regenerate api/crd and operator/config/rbac.yaml from the pydantic models
	$(PY) -m mysql_operator.manifests

# The documentation site (MkDocs + Material): --strict turns a broken link, a page missing from the nav
# or a failing hook (docs/hooks/configref.py: the configuration reference) into an error.
docs: $(VENV)/.installed ## build the documentation site into site/ (mkdocs build --strict)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.installed ## the documentation site on http://127.0.0.1:8000, rebuilt on every edit
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

# What a release publishes (.github/workflows/release.yml): each distribution's sdist, and its wheel built
# from that sdist, checked by twine (metadata, README rendering) and by hack/check_dists.py (the package
# and LICENSE in each archive; no tests, caches or compiled files).
dist: $(VENV)/.installed ## sdists and wheels of kube-envtest and mysqlcluster-operator into dist/, checked
	rm -rf dist
	for project in envtest operator; do $(PY) -m build --outdir dist $$project || exit 1; done
	$(PY) -m twine check --strict dist/*
	$(PY) hack/check_dists.py dist

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mysql_operator.manifests --check
	GOBIN=$(CURDIR)/$(VENV)/bin go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
	$(VENV)/bin/actionlint
	$(PY) hack/lint_doc_workflows.py $(VENV)/bin/actionlint

# kind: the binary on PATH, else built once with go at the pinned version; the node image is one docker has
# or can pull (ENVTEST_KIND_IMAGE, else the pinned one), else the offline one `make kind-image` built (cached
# by content) — never built implicitly. Only kind-host/kind-up/kind-image touch the host (`envtest kind
# host-setup`: dockerd started, docker.io/capwrap where needed; every change printed). Versions: `$(PY) -m
# envtest.pins`. The offline image holds Kubernetes' own images only: the operator's are stand-ins from its
# test kit (tests/kit/standins.py), loaded by `make kind-standins`; STANDIN_ENV points the operator at them
# (empty on a cluster that pulls the real images).
NICE ?= nice -n 10
STANDINS = $(PY) tests/kit/standins.py
STANDIN_ENV = $$($(STANDINS) env --name $(KIND_CLUSTER))
KIND_SMOKE_TIMEOUT ?= 2100
KIND_SMOKE_PATHS ?= tests/e2e

kind-host: $(VENV)/.installed ## docker usable for kind: dockerd started, docker.io/capwrap where needed (idempotent)
	$(PY) -m envtest.cli kind host-setup

kind-image: $(VENV)/.installed ## host set up, then the offline kind node image (cold ≈ 26 min on 2 cores, cached: 3 s)
	$(NICE) $(PY) -m envtest.cli kind image build

kind-up: kind-host ## a kind cluster for `pytest --envtest-backend=kind`, reused if running
	$(NICE) $(PY) -m envtest.cli kind up --name $(KIND_CLUSTER) --config kind-config.yaml

kind-standins: kind-up ## the operator's stand-in images loaded into the cluster, if its node image needs them
	$(NICE) $(STANDINS) load --name $(KIND_CLUSTER)

kind-down: $(VENV)/.installed ## delete the cluster; fails if a container, network or volume of it is left
	$(PY) -m envtest.cli kind down --name $(KIND_CLUSTER)
	$(PY) hack/kind_leftovers.py --name $(KIND_CLUSTER)

# Sharded, the skip share is checked on the merged report: one shard may hold most local-only tests.
e2e-kind: kind-standins ## E2E on `make kind-up`'s cluster (created if missing; it stays: `make kind-down`)
	env $(STANDIN_ENV) $(PY) -m pytest tests/e2e -n $(WORKERS) -rs --envtest-backend=kind \
		--envtest-cluster-name=$(KIND_CLUSTER) --junitxml=artifacts/junit-kind.xml $(SPLIT_ARGS) $(PYTEST_ARGS)
	$(if $(SHARDS),,$(PY) hack/skipcheck.py artifacts/junit-kind.xml --max-skipped 0.5)

# A smoke test that skips proves nothing: both smoke targets fail on any skip (hack/skipcheck.py).
kind-smoke: kind-standins ## the CI smoke set on `make kind-up`'s cluster (kind_smoke, real_database); fails on a skip
	env $(STANDIN_ENV) timeout $(KIND_SMOKE_TIMEOUT) $(PY) -m pytest $(KIND_SMOKE_PATHS) -m "kind_smoke or real_database" -rs \
		--envtest-backend=kind --envtest-cluster-name=$(KIND_CLUSTER) --junitxml=artifacts/junit-kind-smoke.xml \
		--envtest-artifacts-dir=artifacts/kind-smoke $(PYTEST_ARGS)
	$(PY) hack/skipcheck.py artifacts/junit-kind-smoke.xml --max-skipped 0

# In-cluster, as kubebuilder's E2E does it: the image built without a registry (BASE_IMAGE: Debian's
# python3 and a local wheelhouse), `kind load`ed, `make deploy`ed with its RBAC; the stand-ins set.
KUBECTL = $$($(PY) -m envtest.cli binaries path kubectl)
KIND_KUBECONFIG = $$($(PY) -c 'from envtest.kind import kubeconfig_path; print(kubeconfig_path("$(KIND_CLUSTER)"))')
OPERATOR_IMAGE ?= mysql-operator:dev
CRD = mysqlclusters.db.example.com

kind-deploy: kind-standins ## the operator's image built here, loaded into kind and deployed with `make deploy`
	base=$$($(PY) -m envtest.cli kind image pybase operator) && \
		$(NICE) docker build -q --build-arg BASE_IMAGE=$$base -f operator/config/Dockerfile -t $(OPERATOR_IMAGE) .
	$$($(PY) -m envtest.cli kind path) load docker-image $(OPERATOR_IMAGE) --name $(KIND_CLUSTER)
	# A pytest session on this cluster (kind-smoke, e2e-kind) leaves the CRD's conversion pointing at its
	# own endpoint, gone with it; `kubectl apply` of strategy None cannot drop that webhook: reset it first.
	! $(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) get crd $(CRD) -o name >/dev/null 2>&1 || \
		$(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) patch crd $(CRD) --type=merge \
		-p '{"spec":{"conversion":{"strategy":"None","webhook":null}}}'
	PATH="$$(dirname $(KUBECTL)):$$PATH" KUBECONFIG=$(KIND_KUBECONFIG) $(MAKE) deploy
	e="$(STANDIN_ENV)"; [ -z "$$e" ] || $(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) \
		-n mysql-operator-system set env deploy/mysql-operator $$e
	$(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) -n mysql-operator-system rollout status deploy/mysql-operator --timeout=300s

# No conversion endpoint here: the run would re-point the deployed CRD at this host, and leave it pointing
# at an endpoint that is gone; the deployed operator is tested with the CRD as `make deploy` applied it
# (api/crd, not the suite's api/crd/testing, which serves v1alpha1 for a conversion webhook).
kind-deployed-smoke: $(VENV)/.installed ## the smoke test of `make kind-deploy`'s operator; fails on a skip
	$(PY) -m pytest tests/e2e/test_deployed_operator.py -m kind_deployed -rs --envtest-backend=kind \
		--envtest-cluster-name=$(KIND_CLUSTER) -o envtest_conversion_webhook= -o envtest_crds=api/crd \
		--junitxml=artifacts/junit-kind-deployed.xml --envtest-artifacts-dir=artifacts/kind-deployed $(PYTEST_ARGS)
	$(PY) hack/skipcheck.py artifacts/junit-kind-deployed.xml --max-skipped 0

kind-undeploy: $(VENV)/.installed ## remove `make kind-deploy`'s operator (CRD and RBAC stay)
	$(KUBECTL) --kubeconfig $(KIND_KUBECONFIG) delete -f operator/config/manager.yaml --ignore-not-found --wait

run-kind: kind-standins ## the operator on the host, attached to the kind cluster, with the sample until Running
	env $(STANDIN_ENV) $(PY) hack/run_kind.py --name $(KIND_CLUSTER)

deploy: ## CRD, RBAC and the operator Deployment into the current kubectl context
	kubectl apply -f api/crd/ -f operator/config/rbac.yaml -f operator/config/manager.yaml \
		-f operator/config/leader_election_role.yaml  # after manager.yaml, which makes its namespace

clean:
	$(VENV)/bin/envtest down --all 2>/dev/null || true
	rm -rf $(VENV) artifacts .pytest_cache site dist
