"""The operator as the envtest plugin runs it: `run` in a thread, given what it names, made as the
test's operator ServiceAccount (pytest.ini names `operator`; test_pykube.py picks the other)."""

from envtest.adapters.threads import run_in_thread
from mirror import k8s_client, pykube_client

operator = run_in_thread(k8s_client.run)  # gets k8s= (an ApiClient) and namespace=
pykube_operator = run_in_thread(pykube_client.run)  # gets api_factory= and namespace=
