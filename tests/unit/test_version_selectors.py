"""Kubernetes version selectors (`1.36`, `1.36.x`, `~1.36.2`, `1.36.2`, `latest`, `latest-on-disk`) and
the per-minor pin table they resolve against, with a fake binary cache in a temporary XDG_CACHE_HOME.

The expected releases come from envtest.pins, so the tests keep pinning the grammar across pin bumps."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envtest import binaries, pins
from envtest.binaries import versions
from envtest.errors import ConfigError, UsageProblem
from envtest.pins import PINNED, SUPPORTED

pytest_plugins = ["pytester"]

NEWEST, MIDDLE, OLDEST = SUPPORTED[-1], SUPPORTED[-2], SUPPORTED[0]
UNSUPPORTED_MINOR = f"1.{int(OLDEST.minor.split('.')[1]) - 1}"  # just below the window


def _patch_below(p: pins.MinorPins) -> str:
    """An exact release of the minor that is not its pin (the pin's patch minus one, or .0 → rc)."""
    patch = int(p.kubernetes.split(".")[2])
    return f"{p.minor}.{patch - 1}" if patch else f"{p.minor}.0-rc.1"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty binary cache and no selector from the caller's environment."""
    for var in list(os.environ):
        if var.startswith(("TEST_ASSET_", "ENVTEST_")) or var == "KUBEBUILDER_ASSETS":
            monkeypatch.delenv(var)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "envtest" / "k8s"


def install_fake(version: str, *names: str, platform: str | None = None) -> Path:
    """Fake executables in the cache directory of `version` (this os/arch unless `platform`)."""
    directory = binaries.cache_root() / f"{version}-{platform or '-'.join(binaries.platform_tag())}"
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


# -- the pin table ------------------------------------------------------------------------------------


def test_at_least_the_three_newest_minors_are_supported_in_order_without_gaps() -> None:
    minors = [tuple(int(n) for n in p.minor.split(".")) for p in SUPPORTED]
    assert len(minors) >= 3
    assert minors == sorted(minors)
    assert all(b[1] == a[1] + 1 for a, b in itertools.pairwise(minors)), minors


def test_the_default_pins_are_the_newest_minor_s() -> None:
    assert (PINNED.kubernetes, PINNED.etcd, PINNED.kwok, PINNED.kind_node_image) == (
        NEWEST.kubernetes,
        NEWEST.etcd,
        NEWEST.kwok,
        NEWEST.kind_node_image,
    )
    assert binaries.k8s_version() == NEWEST.kubernetes


@pytest.mark.parametrize("p", SUPPORTED, ids=lambda p: p.minor)
def test_each_minor_pins_a_patch_of_itself_and_a_digest_pinned_kind_image_of_that_minor(
    p: pins.MinorPins,
) -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", p.kubernetes) and p.kubernetes.startswith(p.minor + ".")
    assert re.fullmatch(r"3\.\d+\.\d+", p.etcd) and re.fullmatch(r"\d+\.\d+\.\d+", p.kwok)
    image = re.fullmatch(r"kindest/node:v(\d+\.\d+)\.\d+@sha256:[0-9a-f]{64}", p.kind_node_image)
    assert image and image.group(1) == p.minor, p.kind_node_image
    assert pins.for_minor(p.kubernetes) is p and pins.for_minor(f"v{p.minor}") is p


def test_pins_supported_prints_the_patch_pins_comma_separated_as_users_run_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "envtest.pins", "supported"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == ",".join(p.kubernetes for p in SUPPORTED) + "\n"


def test_pins_supported_verbose_names_each_minor_s_etcd_kwok_kind_image_and_node_parts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert pins.main(["supported", "--verbose"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SUPPORTED)
    for line, p in zip(lines, SUPPORTED, strict=True):
        fields = line.split("\t")
        assert fields[0] == p.minor
        assert dict(f.split("=", 1) for f in fields[1:]) == {
            "kubernetes": p.kubernetes,
            "etcd": p.etcd,
            "kwok": p.kwok,
            "kind_node_image": p.kind_node_image,
            "coredns": p.coredns,
            "pause": p.pause,
            "cri_tools": p.cri_tools,
        }
    assert pins.main(["supported", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [p.kubernetes for p in SUPPORTED]


def test_pins_keeps_printing_every_default_pin_for_make_and_ci(capsys: pytest.CaptureFixture[str]) -> None:
    assert pins.main([]) == 0
    assert f"KUBERNETES={NEWEST.kubernetes}\n" in capsys.readouterr().out
    assert pins.main(["etcd"]) == 0
    assert capsys.readouterr().out == f"{NEWEST.etcd}\n"


# -- the grammar ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("latest", NEWEST.kubernetes),
        (MIDDLE.minor, MIDDLE.kubernetes),
        (f"v{MIDDLE.minor}", MIDDLE.kubernetes),
        (f"{MIDDLE.minor}.x", MIDDLE.kubernetes),
        (f"{OLDEST.minor}.*", OLDEST.kubernetes),
        (MIDDLE.kubernetes, MIDDLE.kubernetes),
        (f"v{NEWEST.kubernetes}", NEWEST.kubernetes),
        (f" {NEWEST.kubernetes} ", NEWEST.kubernetes),
        (_patch_below(MIDDLE), _patch_below(MIDDLE)),  # an exact release need not be the pin
        (f"{NEWEST.minor}.0-rc.1", f"{NEWEST.minor}.0-rc.1"),
        (f"~{_patch_below(MIDDLE)}", MIDDLE.kubernetes),  # the pin is new enough
        (f"~{MIDDLE.minor}.99", f"{MIDDLE.minor}.99"),  # it is not: at least what was asked for
        (f"~v{OLDEST.minor}.0", OLDEST.kubernetes),
    ],
)
def test_a_selector_resolves_to_one_exact_release(selector: str, expected: str) -> None:
    assert binaries.k8s_version(selector) == expected
    assert binaries.k8s_version(expected) == expected  # resolving again changes nothing


@pytest.mark.parametrize(
    "selector",
    ["", "newest", "1", "1.x", "v", "1.37.2.1", "1.37.2+build", "latest-on-dsk", "~1.37", ">=1.36"],
)
def test_a_malformed_selector_is_a_config_error_listing_the_supported_ones(selector: str) -> None:
    with pytest.raises(ConfigError) as info:
        binaries.k8s_version(selector)
    message = str(info.value)
    assert message.startswith(f"version={selector!r}: not a Kubernetes version selector")
    for p in SUPPORTED:
        assert f"{p.minor} (pinned {p.kubernetes})" in message
    assert "latest-on-disk" in message


@pytest.mark.parametrize(
    "selector",
    [
        UNSUPPORTED_MINOR,
        f"{UNSUPPORTED_MINOR}.x",
        f"{UNSUPPORTED_MINOR}.3",
        f"~{UNSUPPORTED_MINOR}.1",
        f"1.{int(NEWEST.minor.split('.')[1]) + 1}.0",
    ],
)
def test_a_minor_no_pin_covers_is_refused_even_as_an_exact_release(selector: str) -> None:
    with pytest.raises(ConfigError, match=r"is not supported; supported minors: ") as info:
        binaries.k8s_version(selector)
    assert all(p.minor in str(info.value) for p in SUPPORTED)


def test_the_error_names_where_the_selector_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVTEST_K8S_VERSION", UNSUPPORTED_MINOR)
    with pytest.raises(ConfigError, match=rf"^ENVTEST_K8S_VERSION='{re.escape(UNSUPPORTED_MINOR)}': "):
        binaries.cache_dir()
    with pytest.raises(ConfigError, match=r"^--k8s-version='nope': "):
        binaries.k8s_version("nope", source="--k8s-version")


def test_the_environment_variable_takes_a_selector_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVTEST_K8S_VERSION", f"{MIDDLE.minor}.x")
    assert binaries.cache_dir().name == f"{MIDDLE.kubernetes}-{'-'.join(binaries.platform_tag())}"


def test_releases_sort_as_semver_does() -> None:
    ordered = ["1.36.4-alpha.1", "1.36.4-rc.0", "1.36.4", "1.36.9", "1.36.10", "1.37.0"]
    assert sorted(reversed(ordered), key=lambda v: versions.sort_key(v) or ()) == ordered
    assert versions.sort_key("1.36") is None and versions.sort_key("junk") is None


# -- latest-on-disk ------------------------------------------------------------------------------------


def test_latest_on_disk_is_the_newest_cached_release_that_can_start_a_plane(cache: Path) -> None:
    install_fake(OLDEST.kubernetes, "etcd", "kube-apiserver")
    install_fake(_patch_below(MIDDLE), "etcd", "kube-apiserver")
    install_fake(NEWEST.kubernetes, "kubectl")  # a client alone cannot start a plane
    install_fake(f"{NEWEST.minor}.99", "kube-apiserver", platform="other-arch")  # not this machine's
    install_fake(f"{UNSUPPORTED_MINOR}.0", "kube-apiserver")  # no pin covers it
    install_fake(f"1.{int(NEWEST.minor.split('.')[1]) + 1}.0", "kube-apiserver")  # nor this one
    (cache / f".tmp-{NEWEST.kubernetes}-linux-amd64-abc").mkdir()  # an install in progress
    assert binaries.k8s_version("latest-on-disk") == _patch_below(MIDDLE)
    install_fake(MIDDLE.kubernetes, "kube-apiserver")
    assert binaries.k8s_version("latest-on-disk") == MIDDLE.kubernetes


def test_latest_on_disk_with_nothing_cached_names_the_cache_and_the_install_command(cache: Path) -> None:
    install_fake(f"{UNSUPPORTED_MINOR}.0", "kube-apiserver")
    with pytest.raises(ConfigError) as info:
        binaries.k8s_version("latest-on-disk")
    message = str(info.value)
    assert f"no release of a supported minor is installed in {cache}" in message
    assert f"only unsupported: {UNSUPPORTED_MINOR}.0" in message
    assert "-m envtest.cli binaries install --k8s-version latest" in message


# -- the plugin's option and ini key -------------------------------------------------------------------


def _settings(pytester: pytest.Pytester, ini: str, *args: str):  # type: ignore[no-untyped-def]
    from envtest.plugin import settings

    pytester.makeini("[pytest]\n" + ini)
    return settings.resolve(pytester.parseconfig(*args))


def test_the_ini_key_and_option_take_selectors_and_settings_keep_the_exact_release(
    pytester: pytest.Pytester,
) -> None:
    assert _settings(pytester, f"envtest_k8s_version = {MIDDLE.minor}.x\n").version == MIDDLE.kubernetes
    chosen = _settings(pytester, f"envtest_k8s_version = {MIDDLE.minor}\n", "--envtest-k8s-version=latest")
    assert chosen.version == NEWEST.kubernetes  # the command line beats the ini
    assert f"k8s v{NEWEST.kubernetes} " in chosen.header()
    assert _settings(pytester, "").version == NEWEST.kubernetes  # not given: the newest pin


def test_envtest_k8s_version_is_resolved_into_the_settings_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVTEST_K8S_VERSION", f"{OLDEST.minor}.x")
    assert _settings(pytester, "").version == OLDEST.kubernetes
    assert _settings(pytester, "", f"--envtest-k8s-version={MIDDLE.minor}").version == MIDDLE.kubernetes


def test_an_unsupported_ini_selector_is_a_usage_error_naming_the_key_and_the_supported_ones(
    pytester: pytest.Pytester,
) -> None:
    with pytest.raises(UsageProblem) as info:
        _settings(pytester, f"envtest_k8s_version = {UNSUPPORTED_MINOR}.x\n")
    message = str(info.value)
    assert message.startswith("--envtest-k8s-version (ini envtest_k8s_version)=")
    assert all(f"{p.minor} (pinned {p.kubernetes})" in message for p in SUPPORTED)


def test_latest_on_disk_with_an_empty_cache_is_a_usage_error_at_startup(pytester: pytest.Pytester) -> None:
    with pytest.raises(UsageProblem, match="no release of a supported minor is installed"):
        _settings(pytester, "", "--envtest-k8s-version=latest-on-disk")
