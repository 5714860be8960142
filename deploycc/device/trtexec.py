"""A bundle that run_on_device.sh ran (a board without TensorRT's Python bindings): trtexec left
its outputs, times and log in the folder; here they are judged against the reference and read
into result.json's form, as run_on_device.py would have written it.

trtexec writes its outputs as `[{ "name": ..., "dimensions": "AxB", "values": [...] }, ...]`
(exportJSONOutput in samples/common/sampleReporting.cpp, 8.2.1 to 10.0.1).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from deploycc.device import BOARD_ENGINE
from deploycc.device.bundle import MODEL_NAME, REFERENCE_DIR, TRTEXEC_LOG, TRTEXEC_OUTPUT
from deploycc.device.logs import parse_trtexec_summary
from deploycc.device.run_on_device import RESULT_SCHEMA
from deploycc.taxonomy import BuildStatus, Stage


def result_from_trtexec(folder: Path, index: dict[str, Any]) -> dict[str, Any]:
    """result.json's content for the bundle `folder` run_on_device.sh ran in, whose reference
    index is `index`: trtexec's exported outputs compared with the reference here, its
    performance summary read from its log."""
    import numpy as np

    from deploycc.verify.compare import compare

    log_path = folder / TRTEXEC_LOG
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    digest = hashlib.sha256((folder / MODEL_NAME).read_bytes()).hexdigest()
    result: dict[str, Any] = {"schema": RESULT_SCHEMA, "engine": f"{BOARD_ENGINE} (trtexec)",
                              "status": BuildStatus.FAILED_ON_DEVICE, "stage": Stage.RUN,
                              "model_sha256": digest}
    exported = folder / TRTEXEC_OUTPUT
    if not exported.is_file():
        lines = [line for line in log.splitlines() if line.strip()]
        result["reason"] = f"trtexec left no {TRTEXEC_OUTPUT}: {lines[-1] if lines else 'no log'}"
        return result
    outputs = json.loads(exported.read_text())
    tolerances = index["tolerances"]
    rows = []
    for entry in index["outputs"]:
        expected = np.fromfile(folder / REFERENCE_DIR / entry["file"],
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
        return result
    summary = parse_trtexec_summary(log)
    latency = summary.get("latency") or {}
    percentiles = latency.get("percentiles_ms", {})
    result["latency"] = {"iterations": None, "p50_ms": latency.get("median_ms"),
                         "p90_ms": percentiles.get("90"), "p99_ms": percentiles.get("99"),
                         "mean_ms": latency.get("mean_ms"),
                         "throughput_per_s": summary.get("throughput_qps"), "trtexec": summary}
    result.update(status=BuildStatus.VERIFIED_ON_DEVICE, stage=Stage.DONE)
    return result
