"""A tiny operator: every ConfigMap labelled `mirror.examples.envtest.io/source=true` gets a copy,
`<name>-mirror`, owned by it and kept equal to it. Written twice, on the official `kubernetes`
client (`mirror.k8s_client`) and on pykube-ng (`mirror.pykube_client`): both run the same way in production
(`run(stop, ...)` until `stop` is set) and under the envtest plugin (`mirror.testing`)."""

SOURCE_LABEL = "mirror.examples.envtest.io/source"
MIRROR_OF = "mirror.examples.envtest.io/mirror-of"
WATCH_SECONDS = 1
"""Server-side timeout of each watch: at most this long between `stop` and the end of `run` (the
next watch resumes where this one ended, so nothing is missed)."""


def data_patch(current: dict[str, str] | None, desired: dict[str, str] | None) -> dict[str, str | None]:
    """A merge patch of `data` turning `current` into `desired`: a removed key must be sent as null."""
    current, desired = current or {}, desired or {}
    return {**dict.fromkeys(set(current) - set(desired)), **desired}
