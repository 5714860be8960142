"""Bring a board's result back: `deploycc device import OUTDIR result.json`.

The board ran the bundle's run_on_device.py and wrote result.json. Importing it moves the
build's status from pending-on-device to verified-on-device or failed-on-device (with the stage
and the reason), and puts the board's verification per output, latency and memory into
report.json, report.md and manifest.json. A result from another bundle (the model's sha256
differs), one that is truncated, or one of a newer schema than this deploycc reads, is refused
with one line and leaves the directory as it was. report.md is rendered again from the updated
record, as `build` rendered it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from deploycc.errors import OptionError
from deploycc.io import write_text_atomic
from deploycc.records.build import BuildReport
from deploycc.records.device import RESULT_SCHEMA, DeviceResult
from deploycc.taxonomy import BuildStatus, Precision, Stage


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise OptionError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise OptionError(f"{path}: not a readable {what} ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else 'truncated?'})") from None
    if not isinstance(data, dict):
        raise OptionError(f"{path}: not a {what} (a JSON object was expected)")
    return data


def _summary(device: DeviceResult) -> str:
    if not device.verified:
        return f"failed on the device at stage {device.stage}: {device.reason or ''}"
    engine = f"{device.engine} {device.engine_version or ''}".strip()
    p50 = (device.latency or {}).get("p50_ms")
    return f"verified on the device with {engine}" + (f", p50 {p50} ms" if p50 is not None else "")


def _next_step(device: DeviceResult, precision: Precision | None) -> str:
    """What to do after the board's run: the engine to deploy, or the way past the stage that failed
    (the stages are run_on_device.py's: read, build, run, verify, bench)."""
    again = "copy bundle/ to the device and run `python3 run_on_device.py` there again"
    if device.verified:
        if not device.engine.startswith("tensorrt"):
            return (f"{device.engine} stood in for TensorRT: run `python3 run_on_device.py` on the board "
                    "without --engine to build and verify the TensorRT engine itself, then import its result")
        return ("deploy model.plan from the bundle folder on the device (a plan runs only on the TensorRT "
                "and the board that built it); its latency and memory are under 'On the device' in report.md")
    higher = Precision.FP32 if precision in (Precision.FP16, Precision.INT8) else None
    return {
        Stage.READ: f"the board could not read the bundle: {again}, with every file of bundle/",
        Stage.BUILD: "TensorRT could not build the engine on the device: rebuild for the board's JetPack "
                     "(--jetpack) or with --partition (what TensorRT refuses runs on the host), "
                     f"then {again}",
        Stage.RUN: f"the engine was built but did not run on the device: see the reason above, then {again}",
        Stage.VERIFY: "the engine's outputs on the device differ from the reference beyond the tolerance: "
                      + (f"rebuild with --precision {higher}" if higher else "inspect the output named above")
                      + f", then {again}",
        Stage.BENCH: f"the engine was verified but could not be timed on the device: {again}",
    }.get(device.stage, f"see the reason above, then {again}")


def result_from_trtexec(folder: Path) -> DeviceResult:
    """The result of a bundle run by run_on_device.sh: trtexec's exported outputs judged against
    the reference here, its performance summary read from its log. trtexec writes its outputs
    as `[{ "name": ..., "dimensions": "AxB", "values": [...] }, ...]` (exportJSONOutput in
    samples/common/sampleReporting.cpp, 8.2.1 to 10.0.1)."""
    import numpy as np

    from deploycc.backends.tensorrt import bundle as bundles
    from deploycc.backends.tensorrt.logs import parse_trtexec_summary
    from deploycc.verify.compare import compare

    index = _read_json(folder / bundles.REFERENCE_DIR / bundles.REFERENCE_INDEX, "reference index")
    log_path = folder / bundles.TRTEXEC_LOG
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    digest = hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()
    result: dict[str, Any] = {"schema": RESULT_SCHEMA, "engine": "tensorrt (trtexec)",
                              "status": BuildStatus.FAILED_ON_DEVICE, "stage": Stage.RUN,
                              "model_sha256": digest}
    exported = folder / bundles.TRTEXEC_OUTPUT
    if not exported.is_file():
        lines = [line for line in log.splitlines() if line.strip()]
        result["reason"] = f"trtexec left no {bundles.TRTEXEC_OUTPUT}: {lines[-1] if lines else 'no log'}"
        return DeviceResult.from_dict(result, str(folder))
    outputs = json.loads(exported.read_text())
    tolerances = index["tolerances"]
    rows = []
    for entry in index["outputs"]:
        expected = np.fromfile(folder / bundles.REFERENCE_DIR / entry["file"],
                               dtype=np.dtype(entry["dtype"]).newbyteorder("<")).reshape(entry["shape"])
        found = next((o for o in outputs if o.get("name") == entry["name"]), None)
        if found is None:
            rows.append({"name": entry["name"], "passed": False, "problem": "not in trtexec's output"})
            continue
        dims = [int(d) for d in str(found.get("dimensions", "")).split("x") if d]
        actual = np.asarray(found.get("values", []), dtype=np.float64).reshape(dims or [-1])
        comparison = compare(entry["name"], expected, actual, atol=tolerances["atol"],
                             rtol=tolerances["rtol"], min_cosine=tolerances["min_cosine"])
        rows.append({"name": entry["name"], "passed": comparison.passed,
                     "max_abs_error": comparison.max_abs_error, "cosine": comparison.cosine_similarity,
                     "problem": comparison.problem})
    result.update(outputs=rows, tolerances=tolerances, stage=Stage.VERIFY)
    failed = [row for row in rows if not row["passed"]]
    if failed:
        result["reason"] = f"output '{failed[0]['name']}': {failed[0].get('problem') or 'differs'}"
        return DeviceResult.from_dict(result, str(folder))
    summary = parse_trtexec_summary(log)
    latency = summary.get("latency") or {}
    percentiles = latency.get("percentiles_ms", {})
    result["latency"] = {"iterations": None, "p50_ms": latency.get("median_ms"),
                         "p90_ms": percentiles.get("90"), "p99_ms": percentiles.get("99"),
                         "mean_ms": latency.get("mean_ms"),
                         "throughput_per_s": summary.get("throughput_qps"), "trtexec": summary}
    result.update(status=BuildStatus.VERIFIED_ON_DEVICE, stage=Stage.DONE)
    return DeviceResult.from_dict(result, str(folder))


def import_result(outdir: Path, result_file: Path) -> BuildReport:
    """Merge the board's result (its result.json, or a bundle folder run_on_device.sh ran in)
    into the build directory; the updated report."""
    from deploycc.report.markdown import build_markdown

    report_path, model = outdir / "report.json", outdir / "bundle" / "model.onnx"
    if not report_path.is_file() or not model.is_file():
        raise OptionError(f"{outdir}: not a build directory with a device bundle",
                          hint="give the -o folder of `deploycc build` for a TensorRT target")
    device = result_from_trtexec(result_file) if result_file.is_dir() else \
        DeviceResult.from_dict(_read_json(result_file, "device result"), str(result_file))
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    if device.model_sha256 != digest:
        raise OptionError(f"{result_file}: the result is from another bundle (model sha256 "
                          f"{str(device.model_sha256)[:12]}..., this bundle {digest[:12]}...)")
    if device.tegrastats:
        from deploycc.backends.tensorrt.logs import summarize_tegrastats

        device.tegrastats_summary = summarize_tegrastats(device.tegrastats)
    try:
        built = BuildReport.from_dict(_read_json(report_path, "build report"))
    except (TypeError, ValueError) as error:
        raise OptionError(f"{report_path}: not a build report ({str(error).splitlines()[0]})") from None
    report = dataclasses.replace(built, status=device.status, stage=device.stage, device=device,
                                 summary=_summary(device), next_step=_next_step(device, built.precision))
    manifest_path = outdir / "manifest.json"
    manifest = _read_json(manifest_path, "manifest") if manifest_path.is_file() else None
    markdown = build_markdown(report)  # as `build` wrote it, with the board's status, next step and section
    # Everything read and checked: now write, each file whole.
    write_text_atomic(report_path, report.to_json() + "\n")
    if manifest is not None:
        manifest["status"] = device.status
        kept = ("engine", "engine_version", "host", "machine", "latency", "memory", "model_sha256",
                "tegrastats_summary", "power_mode", "clocks", "nvml")
        board = device.to_dict()
        manifest["device"] = {key: board.get(key) for key in kept}
        write_text_atomic(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    write_text_atomic(outdir / "report.md", markdown)
    return report
