"""Records read back from the JSON they wrote: `device import` renders report.md again from
report.json, so a build's record must come back whole (nested records, enums, tuples, the floats
written as "inf"), and render to the very report.md the build wrote."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from deploycc import api
from deploycc.options import BuildOptions
from deploycc.records.build import BuildReport
from deploycc.records.device import DeviceResult
from deploycc.records.partition import PartitionReport
from deploycc.report.markdown import build_markdown, partition_markdown
from deploycc.results import Result, from_dict
from deploycc.taxonomy import BuildStatus, Precision, Stage
from examples.make_models import small_cnn


def assert_reads_back(outdir: Path) -> None:
    """report.json back into its record: the same JSON, and report.md rendered from it byte for byte."""
    text = (outdir / "report.json").read_text()
    data = json.loads(text)
    partitioned = "segments" in data
    record = (PartitionReport if partitioned else BuildReport).from_dict(data)
    assert record.to_json() + "\n" == text
    rendered = partition_markdown(record) if partitioned else build_markdown(record)
    assert rendered == (outdir / "report.md").read_text()


def test_a_build_report_reads_back_from_its_json(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(bench_iterations=5))
    assert report.status == BuildStatus.VERIFIED and report.benchmark is not None, report.summary
    assert_reads_back(tmp_path / "out")
    again = BuildReport.from_dict(json.loads((tmp_path / "out" / "report.json").read_text()))
    assert again.status is BuildStatus.VERIFIED and again.stage is Stage.DONE
    assert again.precision is Precision.FP32 and again.legalize is not None
    assert again.legalize.passes[0].name == report.legalize.passes[0].name  # nested records, not dicts


@dataclass
class _Inner:
    ratio: float
    bounds: tuple[float, float]
    stage: Stage = Stage.BUILD


@dataclass
class _Outer(Result):
    name: str
    inner: _Inner | None
    many: list[_Inner] = field(default_factory=list)
    sizes: dict[str, list[int | str]] = field(default_factory=dict)


def test_from_dict_reads_what_strict_json_wrote() -> None:
    record = _Outer("x", _Inner(math.inf, (0.5, math.nan), Stage.VERIFY), [_Inner(-math.inf, (1, 2))],
                    {"x": [1, "N"]})
    data = json.loads(record.to_json())
    assert data["inner"]["ratio"] == "inf"  # strict JSON has no Infinity
    back = _Outer.from_dict({**data, "exit_code": 0})  # keys the record does not hold are ignored
    assert back.inner is not None and back.inner.ratio == math.inf and back.inner.stage is Stage.VERIFY
    assert back.inner.bounds[0] == 0.5 and math.isnan(back.inner.bounds[1])
    assert back.many[0].bounds == (1, 2) and back.sizes == {"x": [1, "N"]}
    assert back.to_json() == record.to_json()
    for bad in ({"name": "x"}, {"name": 3, "inner": None}, {"name": "x", "inner": {"ratio": "fast"}}):
        try:
            from_dict(_Outer, bad)
        except (TypeError, ValueError):
            continue
        raise AssertionError(f"read {bad}")


def test_a_device_result_keeps_the_boards_keys_in_order() -> None:
    """What the board wrote comes back as it wrote it (a key of a newer runner of the same schema,
    a null, the order), with what the host adds after it."""
    board = {"tolerances": {"atol": 0.01}, "status": "failed-on-device", "stage": "verify", "schema": 1,
             "engine": "tensorrt", "model_sha256": "ab", "nvml": None, "board_serial": "X1",
             "reason": "output 'y' differs"}
    result = DeviceResult.from_dict(board)
    assert result.status is BuildStatus.FAILED_ON_DEVICE and result.stage is Stage.VERIFY
    assert not result.verified and result.extra == {"board_serial": "X1"}
    assert result.to_dict() == board and list(result.to_dict()) == list(board)
    result.tegrastats_summary = {"samples": 2}
    assert list(result.to_dict()) == [*board, "tegrastats_summary"]
