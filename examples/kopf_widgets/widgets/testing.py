"""The operator as the envtest plugin runs it: one fresh kopf registry per test, logged in as the
test's operator ServiceAccount, watching the test's namespace only (pytest.ini names `operator`)."""

from envtest.adapters.kopf import kopf_operator

operator = kopf_operator("widgets.handlers")
