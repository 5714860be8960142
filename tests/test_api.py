"""The Python API as a user meets it: help() and inspect.signature show each function's parameters,
dir() lists the API, and errors speak the API's terms (force=True), not the command line's."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import pytest

import deploycc
from deploycc.errors import OptionError, OutputExists
from deploycc.options import BuildOptions
from tests.cli.test_cli import GOOD, run


def test_every_function_shows_its_parameters_and_names_only_what_exists() -> None:
    assert set(deploycc.__all__) <= set(dir(deploycc))
    for name in ("build", "check", "legalize"):
        function = getattr(deploycc, name)
        parameters = inspect.signature(function).parameters
        assert not [p for p in parameters.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)], name
        assert {"model", "example_inputs", "jetpack", "dynamic", "exporters"} <= set(parameters), name
        for other in ("build_torch", "build_onnx", "check_torch", "check_onnx", "legalize_torch",
                      "legalize_onnx"):  # not on the package: help must not send a reader there
            assert other not in (function.__doc__ or ""), (name, other)
    assert {"target", "outdir", "options", "force"} <= set(inspect.signature(deploycc.build).parameters)
    assert "targets" in inspect.signature(deploycc.check).parameters


def test_an_existing_outdir_is_refused_in_the_api_s_terms(write_model, tmp_path: Path) -> None:
    model = write_model(GOOD)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExists) as refused:
        deploycc.build(model, "ort-cpu", out, BuildOptions(bench=False))
    assert "force=True" in str(refused.value) and "--force" not in str(refused.value)
    assert pickle.loads(pickle.dumps(refused.value)).for_cli() == refused.value.for_cli()
    cli = run("build", str(model), "-t", "ort-cpu", "-o", str(out))
    assert cli.returncode == 2 and "(pass --force to replace it)" in cli.stderr
    assert "force=True" not in cli.stderr
    built = deploycc.build(model, target="ort-cpu", outdir=out, options=BuildOptions(bench=False), force=True)
    assert built.exit_code == 0 and not (out / "keep.txt").exists()
    with pytest.raises(OutputExists, match="force=True"):
        deploycc.legalize(model, "ort-cpu", tmp_path / "out" / "report.json")


def test_a_file_takes_its_target_second_as_on_the_command_line(write_model, tmp_path: Path) -> None:
    model = write_model(GOOD)
    report = deploycc.check(str(model), ["jetson-xavier", "ort-cpu"])
    assert [t.target for t in report.targets] == ["jetson-xavier", "ort-cpu"]
    assert deploycc.check(model, targets="ort-cpu").targets[0].legal
    legalized = deploycc.legalize(model, "ort-cpu", tmp_path / "l.onnx")
    assert legalized.success and (tmp_path / "l.onnx").exists()
    with pytest.raises(OptionError, match="dynamic= is for a torch model"):
        deploycc.build(model, target="ort-cpu", outdir=tmp_path / "b", dynamic=["x:0"])
    with pytest.raises(OptionError, match="targets given twice"):
        deploycc.check(model, ["ort-cpu"], targets=["jetson-nano"])
