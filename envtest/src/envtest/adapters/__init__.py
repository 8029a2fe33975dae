"""Adapters: an operator on another framework or client library under the plugin, with no glue.

Each turns what a framework needs into an operator factory for `envtest_operator` (or the
`envtest_operator_factory` fixture), building on what the harness gives every factory that names it
(`namespace`, `kubeconfig` — the operator's own identity —, `kube`, `k8s`; see
`envtest.plugin.runner.FACTORY_KEYWORDS`):

- `envtest.adapters.kopf.kopf_operator("myop.handlers")`: a kopf operator, a fresh registry per test;
- `envtest.adapters.threads.run_in_thread(run)`: a blocking `run(stop, *, k8s | kube | …)`, for
  operators on the official `kubernetes` client or on pykube-ng;
- `envtest.adapters.identity.read_identity(kubeconfig)`: server, CA and token of an identity, for a
  framework of your own.

Import them by module: nothing here imports a framework until an operator is built.
"""
