"""Run an operator in-process for a test: start, stop, and surface its crashes.

An operator is anything a factory builds that has `start()`, `stop(timeout)` and `errors` — the
reference operator's Manager does. A blocking `run(stop_event)` function fits through
`ThreadOperator`. Reconcile errors are the operator's business (it retries); an exception that
escapes the operator's own threads lands in `errors` and fails the test that owns it.
"""

from __future__ import annotations

import base64
import copy
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from envtest.errors import OperatorFailed

if TYPE_CHECKING:
    from envtest.transport import Transport


class OperatorLike(Protocol):
    errors: list[BaseException]

    def start(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...


ApiFactory = Callable[[], Any]
OperatorFactory = Callable[..., OperatorLike]
"""Called as `factory(api_factory, namespace=…)`; returns an unstarted operator."""


def api_factory_for(
    kubeconfig: Path, *, timeout: float = 30.0, transport: Transport | None = None
) -> ApiFactory:
    """New pykube-ng clients (each with its own session) for `kubeconfig`, as
    `Cluster.new_pykube_from` makes them, from one reading of the file: an operator asks for one per
    informer and more, and pykube-ng's own loader re-parses the YAML for each (most of the CPU an
    operator start costs). With `transport`, their sessions share its connections (see
    `envtest.transport`)."""
    import pykube
    import yaml

    from envtest.clusters import Cluster

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: 10x faster
    doc = yaml.load(kubeconfig.read_text(), Loader=loader)
    if transport is not None:
        _share_ca_file(doc, transport)

    def new_client() -> Any:
        config = pykube.KubeConfig(copy.deepcopy(doc))  # pykube-ng may rewrite parts of its doc
        config.filepath = kubeconfig  # what relative certificate paths resolve against
        client = Cluster.pykube_client(config, timeout=timeout)
        return transport.attach_client(client) if transport is not None else client

    return new_client


def _share_ca_file(doc: dict[str, Any], transport: Transport) -> None:
    """Inline CA data → the transport's one file for it: the file's path is part of the pool key."""
    for entry in doc.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        data = cluster.get("certificate-authority-data")
        if data:
            cluster["certificate-authority"] = str(transport.ca_file(base64.b64decode(data)))
            del cluster["certificate-authority-data"]


class ThreadOperator:
    """Adapts a blocking `run(stop: threading.Event)` function to the operator contract."""

    def __init__(self, run: Callable[[threading.Event], None], name: str = "operator") -> None:
        self._run, self._name = run, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []

    def _target(self) -> None:
        try:
            self._run(self._stop)
        except BaseException as exc:
            self.errors.append(exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._target, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise OperatorFailed(f"{self._name} did not stop within {timeout:.0f}s")


HARNESS_LOGGER = "envtest"
"""The harness's own loggers (this one and its children) never go into an operator's log."""


class _NotHarness(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != HARNESS_LOGGER and not record.name.startswith(HARNESS_LOGGER + ".")


class OperatorRunner:
    """One operator instance for one test; `stop()` is idempotent and always detaches its log.

    Log capture, while the operator runs: by default every record logged in the process (a
    framework's own loggers, `kopf` say, explain as much as the operator's), at INFO and above, and
    DEBUG of the factory's top package; the harness's loggers aside. `loggers` narrows it to those
    loggers, at DEBUG."""

    def __init__(
        self,
        factory: OperatorFactory,
        api_factory: ApiFactory,
        *,
        namespace: str | None,
        log_path: Path | None = None,
        loggers: Sequence[str] | None = None,
    ) -> None:
        self.factory, self.api_factory, self.namespace = factory, api_factory, namespace
        self.log_path = log_path
        # logger name → level it is lowered to (if above) while the operator runs; handler on each.
        if loggers is None:
            package = str(getattr(factory, "__module__", "") or "").split(".")[0]
            self._levels = {"": logging.INFO, **({package: logging.DEBUG} if package else {})}
            self._attach_to: tuple[str, ...] = ("",)  # the root sees every propagating record
        else:
            self._levels = dict.fromkeys(loggers, logging.DEBUG)
            self._attach_to = tuple(loggers)
        self._handler: logging.Handler | None = None
        self._saved_levels: dict[str, int] = {}
        self.operator: OperatorLike | None = None

    def start(self) -> OperatorLike:
        self._attach_log()
        self.operator = self.factory(self.api_factory, namespace=self.namespace)
        try:
            self.operator.start()
        except BaseException:
            self.stop()
            raise
        return self.operator

    def stop(self, timeout: float = 15.0) -> None:
        try:
            if self.operator is not None:
                self.operator.stop(timeout)
        finally:
            self._detach_log()

    @property
    def errors(self) -> list[BaseException]:
        return list(self.operator.errors) if self.operator is not None else []

    def check(self) -> None:
        """Raise OperatorFailed if the operator crashed (the plugin calls this at teardown)."""
        if self.errors:
            first = self.errors[0]
            raise OperatorFailed(f"operator crashed: {type(first).__name__}: {first}") from first

    def _attach_log(self) -> None:
        if self.log_path is None or self._handler is not None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.log_path)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
        )
        handler.setLevel(logging.DEBUG)
        handler.addFilter(_NotHarness())
        for name, level in self._levels.items():
            logger = logging.getLogger(name)
            self._saved_levels[name] = logger.level
            if logger.getEffectiveLevel() > level:
                logger.setLevel(level)
        for name in self._attach_to:
            logging.getLogger(name).addHandler(handler)
        self._handler = handler

    def _detach_log(self) -> None:
        if self._handler is None:
            return
        for name in self._attach_to:
            logging.getLogger(name).removeHandler(self._handler)
        for name, level in self._saved_levels.items():
            logging.getLogger(name).setLevel(level)
        self._saved_levels.clear()
        self._handler.close()
        self._handler = None
