"""The operator as the envtest plugin runs it: `run` on an event loop of its own, given a
`kubernetes.aio` client made as the test's operator ServiceAccount (pytest.ini names `operator`)."""

from envtest.adapters.aio import async_operator
from mirror_async.operator import run

operator = async_operator(run)
