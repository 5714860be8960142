"""Bring a board's result back: `deploycc device import OUTDIR result.json`.

The board ran the bundle's run_on_device.py and wrote result.json. Importing it moves the
build's status from pending-on-device to verified-on-device or failed-on-device (with the stage
and the reason), and puts the board's verification per output, latency and memory into
report.json, report.md and manifest.json. A result from another bundle (the model's sha256
differs), one that is truncated, or one of a newer schema than this deploycc reads, is refused
with one line and leaves the directory as it was. report.md is rendered again from the updated
record, as `build` rendered it. What the board left is read in the device room (deploycc/device/:
trtexec.py judges run_on_device.sh's outputs, logs.py reads tegrastats); this merges it into
the build's records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from deploycc.device import BOARD_ENGINE, GPU_ENGINE
from deploycc.device.board_files import read_json, read_result
from deploycc.device.bundle import BUNDLE_DIR, MODEL_NAME
from deploycc.errors import OptionError
from deploycc.io import write_text_atomic
from deploycc.records.build import BuildReport
from deploycc.records.device import DeviceResult
from deploycc.taxonomy import Precision, Stage


def _read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from `path`, read bounded (the board's files and the build's alike)."""
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise OptionError(f"{path}: not a {what} (a JSON object was expected)")
    return data


def _generation_power(generation: dict[str, Any]) -> None:
    """A decoder's tokens/s per watt at one prompt length, from tegrastats' input rail while it
    decoded (Jetson), where NVML gave the board none (a discrete GPU's is the runner's, from NVML)."""
    from deploycc.device.logs import board_power_mw, summarize_tegrastats

    if generation.get("tokens_per_s_per_watt") is not None:
        return
    power = board_power_mw(summarize_tegrastats(generation.get("tegrastats") or []))
    if power is None:
        return
    rail, milliwatts = power
    generation["power_rail"], generation["power_mean_mw"] = rail, round(milliwatts, 1)
    if generation.get("decode_tokens_per_s") and milliwatts > 0:
        generation["tokens_per_s_per_watt"] = round(generation["decode_tokens_per_s"] * 1000 / milliwatts, 4)


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
        if device.engine == GPU_ENGINE:
            return ("deploy bundle/ on the GPU host and load it with `ort_gpu_session('bundle')` from its "
                    "run_on_device.py (providers.json holds every provider option); where ORT placed each "
                    "node is under 'On the device' in report.md")
        if not device.engine.startswith(BOARD_ENGINE):
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
    """The result of a bundle run by run_on_device.sh: trtexec's outputs judged here."""
    from deploycc.device.trtexec import result_from_trtexec as judged

    return read_result(judged(folder), folder)


def import_result(outdir: Path, result_file: Path) -> BuildReport:
    """Merge the board's result (its result.json, or a bundle folder run_on_device.sh ran in)
    into the build directory; the updated report."""
    from deploycc.report.markdown import build_markdown

    report_path, model = outdir / "report.json", outdir / BUNDLE_DIR / MODEL_NAME
    if not report_path.is_file() or not model.is_file():
        raise OptionError(f"{outdir}: not a build directory with a device bundle",
                          hint="give the -o folder of `deploycc build` for a TensorRT target")
    device = result_from_trtexec(result_file) if result_file.is_dir() else \
        read_result(_read_json(result_file, "device result"), result_file)
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    if device.model_sha256 != digest:
        raise OptionError(f"{result_file}: the result is from another bundle (model sha256 "
                          f"{str(device.model_sha256)[:12]}..., this bundle {digest[:12]}...)")
    from deploycc.device.logs import summarize_tegrastats

    # the host's reading of the board's lines, never a summary the board sent
    device.tegrastats_summary = summarize_tegrastats(device.tegrastats or []) or None
    for timing in (device.generation or {}).get("prompts", []):
        _generation_power(timing)
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
                "tegrastats_summary", "power_mode", "clocks", "nvml", "generation")
        board = device.to_dict()
        manifest["device"] = {key: board.get(key) for key in kept}
        write_text_atomic(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    write_text_atomic(outdir / "report.md", markdown)
    return report
