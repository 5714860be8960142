"""A Jetson target resolved at a JetPack release describes that release: the header of `targets
show` names the TensorRT and JetPack the body resolves to, never the default release's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deploycc.errors import TargetError
from deploycc.targets import registry
from tests.cli.test_cli import run
from tests.conftest import REPO


def _named(description: str, what: str) -> str | None:
    found = re.search(rf"{what} (\d[\w.]*)", description)
    return found.group(1) if found else None


def test_every_release_s_description_names_its_tensorrt_and_jetpack() -> None:
    checked = 0
    for target in registry.list_targets():
        if target.jetpack is None:
            continue
        for release in target.jetpack.available:
            resolved = registry.resolve(target.name, jetpack=release)
            tensorrt = _named(resolved.description, "TensorRT")
            jetpack = _named(resolved.description, "JetPack")
            # the backend's own version: TensorRT's, or the ORT release of an ORT-on-Jetson variant
            own = (tensorrt if resolved.backend.kind == "tensorrt"
                   else _named(resolved.description, "ONNX Runtime"))
            assert own and resolved.backend.version.startswith(own), (release, resolved.description)
            # and the TensorRT named is the JetPack map's
            mapped = str(dict(resolved.jetpack.facts)["tensorrt"]).split()[0]
            assert tensorrt and (tensorrt.startswith(mapped) or mapped.startswith(tensorrt)), \
                (release, resolved.description, mapped)
            line = jetpack[:-2] if jetpack and jetpack.endswith(".x") else None  # "5.1.x": any 5.1
            assert jetpack == release or (line and f"{release}.".startswith(f"{line}.")), \
                (release, resolved.description)
            checked += 1
    assert checked >= 26  # nano 2, xavier 5, orin 6 releases; as many for their ORT variants


def test_targets_show_at_an_older_jetpack_has_a_header_of_that_release() -> None:
    shown = run("targets", "show", "jetson-xavier", "--jetpack", "4.6.1")
    assert shown.returncode == 0, shown.stderr
    header = shown.stdout.splitlines()[0]
    assert "8.2.1" in header and "4.6.1" in header and "8.5.2" not in header and "5.1" not in header, header


def test_a_release_that_changes_tensorrt_without_a_description_is_refused(tmp_path: Path) -> None:
    text = (REPO / "targets" / "jetson-xavier.toml").read_text()
    text = text.replace('name = "jetson-xavier"', 'name = "my-xavier"', 1)
    text = text.replace("aliases = ", "# aliases = ", 1)
    undescribed = re.sub(r'(\[jetpack\.releases\."4\.6\.2"\]\n)description = [^\n]*\n', r"\1", text)
    assert undescribed != text
    path = tmp_path / "my-xavier.toml"
    path.write_text(undescribed)
    with pytest.raises(TargetError, match=r"'jetpack\.releases\.4\.6\.2\.description'"):
        registry.resolve(str(path))  # at its default release too: the file is wrong as a whole
