"""Each page of the documentation that holds a project (its titled blocks: `pytest.ini`, the operator's
modules, its tests) is written out to a folder and run there with pytest, as a reader would run it.

The getting-started pages and the READMEs run in a virtualenv holding only kube-envtest[kopf] (built
from this repository): a stranger has nothing else. Other pages run with this interpreter. Pages whose
tests need kwok's pods or a plane of their own (LOCAL) start one; the others run against this
session's cluster (`--envtest-backend=existing`), as tests/e2e/test_examples.py does.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import distkit
import docblocks
import pytest

ROOT = distkit.ROOT
PROJECTS = [p for p in docblocks.pages() if docblocks.project_files(p)]
HARNESS_ONLY = {"README.md", "envtest/README.md"} | {
    docblocks.page_id(p) for p in PROJECTS if "getting-started" in p.parts
}
LOCAL = {"docs/getting-started/install.md", "docs/fake-pods.md", "docs/webhooks.md"}
"""Pages whose tests start planes of their own (the library itself, fake pods, private planes)."""


def test_the_pages_with_projects_are_the_ones_expected() -> None:
    # A page that lost its titled blocks would silently stop being run.
    assert {docblocks.page_id(p) for p in PROJECTS} >= HARNESS_ONLY | LOCAL


@pytest.mark.timeout(900)  # a first run builds the harness-only venv (a pip install with dependencies)
@pytest.mark.parametrize("page", PROJECTS, ids=docblocks.page_id)
def test_the_pages_project_passes_as_a_reader_runs_it(
    page: Path, envtest_cluster: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, timeouts: Any
) -> None:
    page_id = docblocks.page_id(page)
    project = tmp_path / "project"
    for name, text in docblocks.project_files(page).items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    if page_id in HARNESS_ONLY:
        python = distkit.harness_venv(tmp_path_factory, timeout=timeouts(600))
    else:
        python = Path(sys.executable)
    env = distkit.clean_env(python, tmp_path)
    report = tmp_path / "report.xml"
    args = [python, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", "-o", "addopts="]
    args += [f"--basetemp={tmp_path / 'base'}", f"--envtest-artifacts-dir={tmp_path / 'artifacts'}"]
    if page_id not in LOCAL:
        env["KUBECONFIG"] = str(envtest_cluster.kubeconfig)
        args.append("--envtest-backend=existing")
        if envtest_cluster.context:
            args.append(f"--envtest-context={envtest_cluster.context}")
    output = distkit.run(*args, env=env, cwd=project, timeout=timeouts(600), check=False)
    suite = ET.parse(report).getroot().find("testsuite") if report.is_file() else None
    assert suite is not None, output
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] > 0 and counts == {**counts, "failures": 0, "errors": 0, "skipped": 0}, output


README = ROOT / "envtest" / "README.md"
TINY_OPERATOR = {
    # kubebuilder's layout: config/crd holds kustomize's files and bases/; the README names config/crd.
    "config/crd/kustomization.yaml": "resources:\n- bases/myop.example.com_widgets.yaml\n",
    "config/crd/bases/myop.example.com_widgets.yaml": """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.myop.example.com}
spec:
  group: myop.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
""",
    # as controller-gen writes it: a ClusterRole named manager-role
    "config/rbac/role.yaml": """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: manager-role}
rules:
  - apiGroups: [myop.example.com]
    resources: [widgets, widgets/status]
    verbs: [get, list, watch, patch, update]
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, create]
  - apiGroups: [""]
    resources: [events]
    verbs: [create]
""",
    "myop/__init__.py": "",
    "myop/handlers.py": """\
import kopf
import kubernetes


@kopf.on.create("myop.example.com", "v1", "widgets")
def create_fn(name, namespace, **_):
    body = {"metadata": {"name": name}, "data": {"made-by": "myop"}}
    kopf.adopt(body)
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, body)  # the default client
""",
    "test_myop.py": """\
from kubernetes import client

from envtest import eventually


def test_a_widget_gets_its_configmap(operator, namespace, kube, k8s):
    body = {"apiVersion": "myop.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    url = f"{kube.url}/apis/myop.example.com/v1/namespaces/{namespace}/widgets"
    kube.session.post(url, json=body, timeout=10).raise_for_status()
    made = eventually(lambda: client.CoreV1Api(k8s).read_namespaced_config_map("w", namespace), timeout=60)
    assert made.data == {"made-by": "myop"}
""",
}


def _readme_blocks(language: str) -> list[str]:
    """The README's untitled blocks of `language` (the titled ones are its own project, run above)."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


@pytest.mark.timeout(900)
def test_the_package_readmes_operator_wiring_runs_for_a_tiny_operator_of_its_shape(
    envtest_cluster: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, timeouts: Any
) -> None:
    """The README's ini block and its `myop/testing.py` as written, around the smallest kopf operator
    in a kubebuilder layout, from a harness-only venv."""
    (ini,) = _readme_blocks("ini")
    (wiring,) = [block for block in _readme_blocks("python") if block.startswith("# myop/testing.py")]
    project = tmp_path / "project"
    for name, text in {**TINY_OPERATOR, "pytest.ini": ini, "myop/testing.py": wiring}.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    python = distkit.harness_venv(tmp_path_factory, timeout=timeouts(600))
    env = {**distkit.clean_env(python, tmp_path), "KUBECONFIG": str(envtest_cluster.kubeconfig)}
    args = [
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-o",
        "pythonpath=.",
        "--envtest-backend=existing",
    ]
    args += [f"--basetemp={tmp_path / 'base'}", f"--envtest-artifacts-dir={tmp_path / 'artifacts'}"]
    if envtest_cluster.context:
        args.append(f"--envtest-context={envtest_cluster.context}")
    output = distkit.run(*args, env=env, cwd=project, timeout=timeouts(600), check=False)
    assert output.startswith("exit 0") and "1 passed" in output, output
