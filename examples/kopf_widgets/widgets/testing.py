"""The operator as the envtest plugin runs it: `kopf run -m widgets.handlers`, once per test, as
the test's operator ServiceAccount, watching the test's namespace (pytest.ini names `operator`)."""

from envtest.adapters.kopf import kopf_operator

operator = kopf_operator("widgets.handlers")
