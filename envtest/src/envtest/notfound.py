"""Is this exception "the object does not exist (yet)"? — for `eventually`, whose commonest wait is
for an object to appear.

Kubernetes answers a GET of a missing *object* with 404 and a Status whose `reason` is NotFound and
whose `details.name` names the object. A 404 for a missing *resource* (a typo in the path, a CRD not
installed) is different: a Status without `details.name`, or a plain "404 page not found". Waiting
never fixes the latter, so only the former counts as "not yet".

The client libraries are looked up in sys.modules, never imported: an exception of a library that
was never imported cannot be raised, and `import envtest` stays light.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

# pykube-ng's HTTPError keeps only the Status message; this is the apiserver's wording for an object.
API_EXCEPTIONS = (
    "kubernetes.client.exceptions",
    "kubernetes.aio.client.exceptions",
    "kubernetes_asyncio.client.exceptions",
)
_OBJECT_MESSAGE = re.compile(r'^\S+ "[^"]+" not found$')


def is_object_not_found(exc: BaseException) -> bool:
    """True for a NotFound naming an object from the kubernetes client, pykube-ng or requests."""
    # The official client's sync and asyncio APIs, and kubernetes_asyncio: one ApiException each.
    for module in (
        "kubernetes.client.exceptions",
        "kubernetes.aio.client.exceptions",
        "kubernetes_asyncio.client.exceptions",
    ):
        kube = sys.modules.get(module)
        if kube is not None and isinstance(exc, kube.ApiException):
            return exc.status == 404 and _names_object(exc.body)
    pykube = sys.modules.get("pykube.exceptions")
    if pykube is not None:
        if isinstance(exc, pykube.ObjectDoesNotExist):
            return True  # raised by get()/get_by_name() for an object lookup only
        if isinstance(exc, pykube.HTTPError):
            if exc.code != 404:
                return False
            # raise_for_status raises it while handling requests' HTTPError, which has the body.
            if exc.__context__ is not None and _response_of(exc.__context__) is not None:
                return is_object_not_found(exc.__context__)
            return bool(_OBJECT_MESSAGE.match(str(exc)))
    response = _response_of(exc)
    if response is not None:
        return getattr(response, "status_code", None) == 404 and _names_object(_body(response))
    return False


def _response_of(exc: BaseException) -> Any:
    requests_exc = sys.modules.get("requests.exceptions")
    if requests_exc is not None and isinstance(exc, requests_exc.HTTPError):
        return exc.response
    return None


def _body(response: Any) -> Any:
    try:
        return response.content
    except Exception:  # a stream already consumed, a connection gone: no body to judge by
        return None


def _names_object(body: Any) -> bool:
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return False  # "404 page not found": no such path at all
    if not isinstance(body, dict):
        return False
    details = body.get("details") or {}
    return body.get("kind") == "Status" and body.get("reason") == "NotFound" and bool(details.get("name"))
