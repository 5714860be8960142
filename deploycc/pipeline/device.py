"""Bring a board's result back: `deploycc device import OUTDIR result.json`.

The board ran the bundle's run_on_device.py and wrote result.json. Importing it moves the
build's status from pending-on-device to verified-on-device or failed-on-device (with the stage
and the reason), and puts the board's verification per output, latency and memory into
report.json, report.md and manifest.json. A result from another bundle (the model's sha256
differs), or one that is truncated, is refused with one line and leaves the directory as it was.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from deploycc.errors import EXIT_FINDINGS, EXIT_OK, OptionError
from deploycc.io import write_text_atomic

VERIFIED_ON_DEVICE, FAILED_ON_DEVICE = "verified-on-device", "failed-on-device"
REQUIRED = ("schema", "status", "stage", "model_sha256", "engine")


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


def _markdown(result: dict[str, Any]) -> str:
    lines = ["", "## On the device", "",
             f"**{result['status']}** (stage {result['stage']}) with {result['engine']} "
             f"{result.get('engine_version', '')} on {result.get('host', '?')} "
             f"({result.get('machine', '?')}, Python {result.get('python', '?')})."]
    if result.get("reason"):
        lines += ["", f"Reason: {result['reason']}"]
    rows = result.get("outputs") or []
    if rows:
        lines += ["", "| output | passed | max abs error | cosine |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {r['passed']} | {r.get('max_abs_error', '')} | {r.get('cosine', '')} |"
                  for r in rows]
    latency = result.get("latency")
    if latency:
        runs = f" over {latency['iterations']} runs" if latency.get("iterations") else ""
        lines += ["", f"Latency: p50 {latency['p50_ms']} ms, p90 {latency['p90_ms']} ms, "
                      f"p99 {latency['p99_ms']} ms{runs}; {latency['throughput_per_s']}/s."]
    power = result.get("tegrastats_summary") or {}
    if power:
        rails = ", ".join(f"{name} {mw} mW" for name, mw in (power.get("power_mean_mw") or {}).items())
        mode = result.get("power_mode") or "power mode unknown"
        lines += ["", f"tegrastats ({power['samples']} samples, {mode}): "
                      f"GPU {power.get('gr3d_mean_percent')}% on average, "
                      f"RAM peak {power.get('ram_peak_mb')} MB"
                      + (f"; mean power {rails}" if rails else "") + "."]
    clocks = result.get("clocks") or {}
    if clocks.get("jetson_clocks") is not None:
        lines += ["", "Clocks locked (jetson_clocks): timings are stable." if clocks["jetson_clocks"] else
                      f"Clocks not locked (CPU {clocks.get('cpu_locked')}, GPU {clocks.get('gpu_locked')}, "
                      f"GPU at {clocks.get('gpu_mhz')} MHz): run `sudo jetson_clocks` for stable timings."]
    nvml = result.get("nvml") or {}
    if nvml.get("before") and nvml.get("after"):
        before, after = nvml["before"], nvml["after"]
        lines += ["", f"NVML: GPU memory {before['gpu_memory_used_kb']} kB before timing, "
                      f"{after['gpu_memory_used_kb']} kB after; power {after.get('power_mw')} mW."]
    memory = result.get("memory") or {}
    if memory:
        rss, nvmap = memory.get("peak_rss_kb"), memory.get("nvmap_delta_kb")
        rss_text = f"{rss} kB" if rss is not None else "n/a (not measured off Linux)"
        nvmap_text = (f"{nvmap} kB" if nvmap is not None else
                      "n/a (no NvMapMemUsed in the board's /proc/meminfo: not a Jetson)")
        lines += ["", f"Memory: peak RSS {rss_text}, NvMap delta {nvmap_text}."]
    return "\n".join(lines) + "\n"


def _summary(result: dict[str, Any]) -> str:
    if result["status"] != VERIFIED_ON_DEVICE:
        return f"failed on the device at stage {result['stage']}: {result.get('reason', '')}"
    engine = f"{result['engine']} {result.get('engine_version') or ''}".strip()
    p50 = (result.get("latency") or {}).get("p50_ms")
    return f"verified on the device with {engine}" + (f", p50 {p50} ms" if p50 is not None else "")


def _next_step(result: dict[str, Any], precision: str | None) -> str:
    """What to do after the board's run: the engine to deploy, or the way past the stage that failed
    (the stages are run_on_device.py's: read, build, run, verify, bench)."""
    again = "copy bundle/ to the device and run `python3 run_on_device.py` there again"
    if result["status"] == VERIFIED_ON_DEVICE:
        if not str(result["engine"]).startswith("tensorrt"):
            return (f"{result['engine']} stood in for TensorRT: run `python3 run_on_device.py` on the board "
                    "without --engine to build and verify the TensorRT engine itself, then import its result")
        return ("deploy model.plan from the bundle folder on the device (a plan runs only on the TensorRT "
                "and the board that built it); its latency and memory are under 'On the device' in report.md")
    higher = "fp32" if precision in ("fp16", "int8") else None
    return {
        "read": f"the board could not read the bundle: {again}, with every file of bundle/",
        "build": "TensorRT could not build the engine on the device: rebuild for the board's JetPack "
                 f"(--jetpack) or with --partition (what TensorRT refuses runs on the host), then {again}",
        "run": f"the engine was built but did not run on the device: see the reason above, then {again}",
        "verify": "the engine's outputs on the device differ from the reference beyond the tolerance: "
                  + (f"rebuild with --precision {higher}" if higher else "inspect the output named above")
                  + f", then {again}",
        "bench": f"the engine was verified but could not be timed on the device: {again}",
    }.get(result["stage"], f"see the reason above, then {again}")


def result_from_trtexec(folder: Path) -> dict[str, Any]:
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
    result: dict[str, Any] = {"schema": 1, "engine": "tensorrt (trtexec)", "status": FAILED_ON_DEVICE,
                              "stage": "run", "model_sha256": digest}
    exported = folder / bundles.TRTEXEC_OUTPUT
    if not exported.is_file():
        lines = [line for line in log.splitlines() if line.strip()]
        result["reason"] = f"trtexec left no {bundles.TRTEXEC_OUTPUT}: {lines[-1] if lines else 'no log'}"
        return result
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
    result.update(outputs=rows, tolerances=tolerances, stage="verify")
    failed = [row for row in rows if not row["passed"]]
    if failed:
        result["reason"] = f"output '{failed[0]['name']}': {failed[0].get('problem') or 'differs'}"
        return result
    summary = parse_trtexec_summary(log)
    latency = summary.get("latency") or {}
    percentiles = latency.get("percentiles_ms", {})
    result["latency"] = {"iterations": None, "p50_ms": latency.get("median_ms"),
                         "p90_ms": percentiles.get("90"), "p99_ms": percentiles.get("99"),
                         "mean_ms": latency.get("mean_ms"),
                         "throughput_per_s": summary.get("throughput_qps"), "trtexec": summary}
    result.update(status=VERIFIED_ON_DEVICE, stage="done")
    return result


def import_result(outdir: Path, result_file: Path) -> dict[str, Any]:
    """Merge the board's result (its result.json, or a bundle folder run_on_device.sh ran in)
    into the build directory; the updated report (as JSON data)."""
    report_path, model = outdir / "report.json", outdir / "bundle" / "model.onnx"
    if not report_path.is_file() or not model.is_file():
        raise OptionError(f"{outdir}: not a build directory with a device bundle",
                          hint="give the -o folder of `deploycc build` for a TensorRT target")
    result = result_from_trtexec(result_file) if result_file.is_dir() else \
        _read_json(result_file, "device result")
    missing = [key for key in REQUIRED if key not in result]
    if missing:
        raise OptionError(f"{result_file}: not a device result (no {', '.join(missing)})")
    if result["status"] not in (VERIFIED_ON_DEVICE, FAILED_ON_DEVICE):
        raise OptionError(f"{result_file}: unknown status {result['status']!r}")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    if result["model_sha256"] != digest:
        raise OptionError(f"{result_file}: the result is from another bundle (model sha256 "
                          f"{str(result['model_sha256'])[:12]}..., this bundle {digest[:12]}...)")
    if result.get("tegrastats"):
        from deploycc.backends.tensorrt.logs import summarize_tegrastats

        result["tegrastats_summary"] = summarize_tegrastats(result["tegrastats"])
    report = _read_json(report_path, "build report")
    report.update(status=result["status"], stage=result["stage"], device=result, summary=_summary(result),
                  next_step=_next_step(result, report.get("precision")),
                  exit_code=EXIT_OK if result["status"] == VERIFIED_ON_DEVICE else EXIT_FINDINGS)
    manifest_path = outdir / "manifest.json"
    manifest = _read_json(manifest_path, "manifest") if manifest_path.is_file() else None
    markdown = (outdir / "report.md").read_text() if (outdir / "report.md").is_file() else ""
    # Everything read and checked: now write, each file whole.
    write_text_atomic(report_path, json.dumps(report, indent=2) + "\n")
    if manifest is not None:
        manifest["status"] = result["status"]
        kept = ("engine", "engine_version", "host", "machine", "latency", "memory", "model_sha256",
                "tegrastats_summary", "power_mode", "clocks", "nvml")
        manifest["device"] = {key: result.get(key) for key in kept}
        write_text_atomic(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    # The build's status line and next step, as the device left them (lambdas: no escapes in replacements).
    status_line = f"**Status: {result['status']}** (stage reached: {result['stage']}). {report['summary']}"
    markdown = re.sub(r"^\*\*Status: [^*]+\*\*.*$", lambda _: status_line, markdown, count=1, flags=re.M)
    markdown = re.sub(r"^- next step: .*$", lambda _: f"- next step: {report['next_step']}", markdown,
                      count=1, flags=re.M)
    marker = markdown.find("\n## On the device")
    kept_markdown = markdown[:marker] if marker >= 0 else markdown  # a second import replaces the first
    write_text_atomic(outdir / "report.md", kept_markdown + _markdown(result))
    return report
