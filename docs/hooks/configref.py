"""MkDocs hook: the configuration reference, generated at build time from what the plugin registers.

A page holding `<!-- envtest:options -->` gets the table of every command-line option and ini key, and
`<!-- envtest:environment -->` the table of every environment variable. The options and ini keys are
the ones the plugin's modules register with pytest (each `pytest_addoption` under `envtest.plugin`,
called with a recording parser), with defaults and choices from the settings registry
(`envtest.plugin.settings.OPTIONS`); the variables are `envtest.environment.VARIABLES`. A key added
anywhere in the plugin therefore appears here without anyone editing the page, and
tests/unit/test_configuration_reference.py fails if one cannot be documented (no help text).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

OPTIONS_MARKER = "<!-- envtest:options -->"
ENVIRONMENT_MARKER = "<!-- envtest:environment -->"

# Read by the harness beside its own ENVTEST_* names: other tools' names, kept as those tools spell them.
FOREIGN_VARIABLES = {
    "KUBEBUILDER_ASSETS": "a directory holding the binaries (controller-runtime's name): before the cache",
    "TEST_ASSET_<NAME>": "one binary's path, e.g. TEST_ASSET_KUBE_APISERVER (controller-runtime's name): "
    "wins over all",
    "KUBECONFIG": "the existing backend's kubeconfig when --envtest-kubeconfig is not given",
    "XDG_CACHE_HOME": "cache root (default ~/.cache): binaries in envtest/k8s/<ver>-<os>-<arch>/, kept "
    "planes in envtest/clusters/, kind in envtest/kind/",
    "GOPROXY": "where module zips come from without go (kwok's stages) and where go builds fetch from",
}


@dataclass
class Setting:
    ini: str
    help: str
    type: str
    option: str | None = None
    default: str | None = None
    choices: tuple[str, ...] | None = None


class _Recorder:
    """Stands in for pytest's Parser: records what a plugin module registers, nothing else."""

    def __init__(self) -> None:
        self.ini: dict[str, tuple[str, str]] = {}
        self.options: dict[str, str] = {}  # --name -> dest

    def addini(self, name: str, help: str, type: str | None = None, default: Any = None) -> None:
        self.ini[name] = (help, type or "string")

    def getgroup(self, name: str, description: str = "") -> _Recorder:
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        for name in names:
            self.options[name] = attrs.get("dest", name.lstrip("-").replace("-", "_"))


def _plugin_modules() -> list[Any]:
    import envtest.plugin as package

    modules = [package]
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        modules.append(importlib.import_module(info.name))
    return modules


def settings() -> list[Setting]:
    """Every ini key the plugin registers, with its command-line twin where it has one."""
    from envtest.plugin import settings as registry

    recorder = _Recorder()
    for module in _plugin_modules():
        hook = getattr(module, "pytest_addoption", None)
        if hook is not None:
            hook(recorder)
    by_dest = {dest: option for option, dest in recorder.options.items()}
    defaults = {"envtest_" + o.name.replace("-", "_"): o for o in registry.OPTIONS}
    found = []
    for ini, (help_, type_) in recorder.ini.items():
        opt = defaults.get(ini)
        found.append(
            Setting(
                ini=ini,
                help=help_,
                type=type_,
                option=by_dest.get(ini),
                default=(("off" if opt.flag else opt.default) if opt else None),
                choices=opt.choices if opt else None,
            )
        )
    return found


def _cell(text: str) -> str:
    # Table cells are Markdown: a bare <name> would be read as an HTML tag and vanish.
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def options_table() -> str:
    rows = [
        "| option | ini key | type | default | what it does |",
        "|---|---|---|---|---|",
    ]
    for s in settings():
        option = f"`{s.option}`" if s.option else "—"
        default = f"`{s.default}`" if s.default else "—"
        what = s.help + (f" (one of: {', '.join(f'`{c}`' for c in s.choices)})" if s.choices else "")
        rows.append(f"| {option} | `{s.ini}` | {s.type} | {default} | {_cell(what)} |")
    count = len(settings())
    with_option = sum(1 for s in settings() if s.option)
    summary = f"{with_option} command-line options, {count} ini keys (from the plugin's registrations)."
    return "\n".join(rows) + "\n\n" + summary + "\n"


def environment_table() -> str:
    from envtest.environment import VARIABLES

    rows = ["| variable | what it does |", "|---|---|"]
    rows += [f"| `{name}` | {_cell(what)} |" for name, what in VARIABLES.items()]
    rows += [f"| `{name}` | {_cell(what)} |" for name, what in FOREIGN_VARIABLES.items()]
    return "\n".join(rows) + "\n"


def render(markdown: str) -> str:
    if OPTIONS_MARKER in markdown:
        markdown = markdown.replace(OPTIONS_MARKER, options_table())
    if ENVIRONMENT_MARKER in markdown:
        markdown = markdown.replace(ENVIRONMENT_MARKER, environment_table())
    return markdown


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
