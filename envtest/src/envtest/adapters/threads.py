"""An operator written as one blocking function — on the official `kubernetes` client, on
pykube-ng, on raw requests — under the plugin, without glue:

    # myop/testing.py, named by the ini: envtest_operator = "myop.testing:operator"
    from envtest.adapters.threads import run_in_thread
    from myop.main import run  # def run(stop, *, k8s, namespace): ... until stop.is_set()
    operator = run_in_thread(run)

`run`'s first parameter is a `threading.Event` set at teardown: return soon after it is set (watch
with a short server-side `timeout_seconds` and check it between events). Its keyword parameters
say what it gets: `namespace` (the test's), `kubeconfig` (Path of its identity), `k8s` (a
`kubernetes.client.ApiClient`), `kube` (a pykube-ng HTTPClient), `api_factory` (a new pykube-ng
client per call: one per watch, as a pool shared by long watches runs dry). Only what it names is
built, as that identity, and the harness closes it after `run` returned. An exception escaping
`run` fails the test.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from envtest.adapters.signatures import name_of as _name
from envtest.adapters.signatures import wanted
from envtest.plugin.runner import FACTORY_KEYWORDS, ThreadOperator

RUN_KEYWORDS = (*FACTORY_KEYWORDS, "api_factory")
"""What `run` may name: the factory's keywords, and the factory's `api_factory` itself."""


def run_in_thread(run: Callable[..., object], *, name: str | None = None) -> Callable[..., ThreadOperator]:
    """An operator factory running `run(stop, **what_it_names)` in a thread named `name` (default:
    the function's name). A parameter of `run` the harness cannot fill is a ConfigError now, when
    the factory is made (at import of the module the ini names), not at the first test."""
    wanted = _wanted(run)

    def factory(api_factory: Any, **given: Any) -> ThreadOperator:
        kwargs = {key: api_factory if key == "api_factory" else given[key] for key in wanted}
        return ThreadOperator(functools.partial(run, **kwargs), name=name or _name(run))

    # The runner reads what to build from this signature: only what `run` names.
    parameters = [inspect.Parameter("api_factory", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY) for key in FACTORY_KEYWORDS if key in wanted
    ]
    factory.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    # The runner captures DEBUG of the factory's top package: make that `run`'s own.
    factory.__module__ = getattr(run, "__module__", None) or __name__
    factory.__qualname__ = factory.__name__ = f"run_in_thread({_name(run)})"
    return factory


def _wanted(run: Callable[..., object]) -> tuple[str, ...]:
    return wanted(run, RUN_KEYWORDS, adapter="run_in_thread", stop="a threading.Event set when the test ends")
