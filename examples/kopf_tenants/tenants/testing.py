"""The operator as the envtest plugin runs it: `kopf run -A -m tenants.handlers`, bound cluster-wide
as the test's operator ServiceAccount (pytest.ini names `operator` and the cluster scope)."""

from envtest.adapters.kopf import kopf_operator

operator = kopf_operator("tenants.handlers", all_namespaces=True)
