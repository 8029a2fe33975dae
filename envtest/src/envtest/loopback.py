"""Traffic to this machine never goes through a proxy.

requests and the kubernetes client both read HTTPS_PROXY/HTTP_PROXY from the environment, and with
no NO_PROXY they send even 127.0.0.1 to the proxy, which cannot reach our loopback apiserver (or
worse, answers for it). We never change os.environ to fix that: the Go module downloads of a binary
build may need the proxy. Instead each client for a loopback server is told to ignore it.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import kubernetes.client
    import requests


def is_loopback(url: str) -> bool:
    """Whether `url` names this machine: localhost, 127.0.0.0/8 or ::1."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def direct_session() -> requests.Session:
    """A session that ignores the environment (proxies, REQUESTS_CA_BUNDLE, .netrc): for probes of our
    own loopback processes, where each call passes what it needs."""
    import requests

    session = requests.Session()
    session.trust_env = False
    return session


def no_proxy_for_loopback(session: requests.Session, server: str) -> requests.Session:
    """Stop `session` from using environment proxies when `server` is loopback. Setting
    `session.proxies` would not do: requests merges environment proxies over it per request."""
    if is_loopback(server):
        session.trust_env = False
    return session


def no_proxy_for_loopback_config(configuration: kubernetes.client.Configuration) -> None:
    """The same for a `kubernetes` client Configuration, before its ApiClient is built (the
    connection pool reads the proxy once, at construction)."""
    if is_loopback(configuration.host):
        configuration.proxy = None  # the setter also stops re-reading the environment on a host change
