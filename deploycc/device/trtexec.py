"""A bundle that run_on_device.sh ran (a board without TensorRT's Python bindings): trtexec left
its outputs, times and log in the folder; here they are judged against the reference and read
into result.json's form, as run_on_device.py would have written it.

trtexec writes its outputs as `[{ "name": ..., "dimensions": "AxB", "values": [...] }, ...]`
(exportJSONOutput in samples/common/sampleReporting.cpp, 8.2.1 to 10.0.1).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from deploycc.device import BOARD_ENGINE
from deploycc.device.board_files import (
    board_file,
    read_array,
    read_log,
    read_reference_index,
    read_trtexec_outputs,
)
from deploycc.device.bundle import MODEL_NAME, TRTEXEC_LOG, TRTEXEC_OUTPUT
from deploycc.device.logs import parse_trtexec_summary
from deploycc.device.run_on_device import RESULT_SCHEMA
from deploycc.taxonomy import BuildStatus, Stage


def result_from_trtexec(folder: Path) -> dict[str, Any]:
    """result.json's content for the bundle `folder` run_on_device.sh ran in: trtexec's exported
    outputs compared with the reference here, its performance summary read from its log. Every
    file is the board's, read through board_files (bounded, checked, never out of `folder`)."""
    from deploycc.verify.compare import compare

    log = read_log(folder, TRTEXEC_LOG)
    digest = hashlib.sha256(board_file(folder, MODEL_NAME, folder, "the model").read_bytes()).hexdigest()
    index_path, index = read_reference_index(folder, digest)
    result: dict[str, Any] = {"schema": RESULT_SCHEMA, "engine": f"{BOARD_ENGINE} (trtexec)",
                              "status": BuildStatus.FAILED_ON_DEVICE, "stage": Stage.RUN,
                              "model_sha256": digest}
    if not (folder / TRTEXEC_OUTPUT).exists() and not (folder / TRTEXEC_OUTPUT).is_symlink():
        lines = [line for line in log.splitlines() if line.strip()]
        result["reason"] = f"trtexec left no {TRTEXEC_OUTPUT}: {lines[-1] if lines else 'no log'}"
        return result
    outputs = read_trtexec_outputs(board_file(folder, TRTEXEC_OUTPUT, folder, "trtexec's outputs"))
    tolerances = index["tolerances"]
    rows = []
    for position, entry in enumerate(index["outputs"]):
        expected = read_array(folder, entry, index_path, f"outputs[{position}]")
        actual = outputs.get(entry["name"])
        if actual is None:
            rows.append({"name": entry["name"], "passed": False, "problem": "not in trtexec's output"})
            continue
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
