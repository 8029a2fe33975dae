"""The control-plane binaries: resolved from the environment or the cache, else installed.

`resolver` holds the lookup order and the cache; `download` the verified release downloads; `gobuild`
the fallback that builds from the Go module proxy.
"""

from envtest.binaries.resolver import (
    CLIENT_BINARIES,
    COMPONENT_BINARIES,
    DEFAULT_INSTALL,
    KNOWN_BINARIES,
    KWOK_STAGES,
    cache_dir,
    cache_root,
    install,
    k8s_version,
    kwok_stages_dir,
    list_installed,
    platform_tag,
    resolve,
    resolve_all,
)
from envtest.pins import PINNED, Versions

__all__ = [
    "CLIENT_BINARIES",
    "COMPONENT_BINARIES",
    "DEFAULT_INSTALL",
    "KNOWN_BINARIES",
    "KWOK_STAGES",
    "PINNED",
    "Versions",
    "cache_dir",
    "cache_root",
    "install",
    "k8s_version",
    "kwok_stages_dir",
    "list_installed",
    "platform_tag",
    "resolve",
    "resolve_all",
]
