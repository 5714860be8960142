"""The board's result: what run_on_device.py (or run_on_device.sh's trtexec, judged here) found
on the device, as `deploycc device import` reads it from result.json.

result.json is a contract between two programs that may be of different releases: the host's
deploycc and the runner copied into a bundle, which runs on the board's Python alone. It carries
its schema's version; the runner checks what it writes against the schema before writing it
(`check_result` in device/run_on_device.py) and the host checks what it reads here, every
field against device_schema.py's RESULT_SPEC, refusing a newer schema in one line
(NotADeviceResult, a ValueError; device/board_files.py's read_result makes it the user's
OptionError).
tests/backends/test_device_runner.py holds the two sides' declarations equal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from deploycc.records.device_schema import RESULT_SPEC, VERIFIED_SPEC, problem
from deploycc.results import from_dict
from deploycc.taxonomy import DEVICE_STAGES, ON_DEVICE, BuildStatus, Precision, Stage

RESULT_SCHEMA = 1  # the newest result.json this deploycc reads
UNKNOWN_PRECISION = "unknown"  # what the runner writes for a layer whose format it could not read
# Every result names its schema, status, stage, engine, and the model it ran (the bundle's
# model.onnx by sha256: a result from another bundle is refused).
REQUIRED = ("schema", "status", "stage", "model_sha256", "engine")


class NotADeviceResult(ValueError):
    """Data that is not a device result this deploycc reads, in one line (`message`); `hint` says
    what to do. device/board_files.py's read_result gives it to the user as an OptionError (exit 2)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass
class DeviceResult:
    """result.json, typed. Measurements the board took are kept as it wrote them; a key this
    deploycc does not know (a runner of the same schema may add one) is kept in `extra`, and the
    JSON written back holds the keys in the order they came, absent ones absent."""

    schema: int
    status: BuildStatus  # verified-on-device | failed-on-device
    stage: Stage  # the board's: read, build, run, verify, bench, done
    model_sha256: str
    engine: str  # "tensorrt", "tensorrt (trtexec)", or "onnxruntime" standing in
    engine_version: str | None = None
    reason: str | None = None  # why it failed, where it did
    host: str | None = None
    machine: str | None = None
    python: str | None = None
    build_seconds: float | None = None
    outputs: list[dict[str, Any]] | None = None  # per output: name, passed, max_abs_error, cosine, ...
    tolerances: dict[str, Any] | None = None
    latency: dict[str, Any] | None = None  # iterations, p50_ms, p90_ms, p99_ms, throughput_per_s, ...
    memory: dict[str, Any] | None = None  # peak_rss_kb, nvmap_delta_kb
    tegrastats: list[str] | None = None  # the raw lines (Jetson)
    tegrastats_summary: dict[str, Any] | None = None  # added on import, read from the lines
    nvml: dict[str, Any] | None = None  # {"before": ..., "after": ...} (a discrete GPU)
    power_mode: str | None = None
    clocks: dict[str, Any] | None = None
    int8_forms: dict[str, Any] | None = None  # an INT8 bundle for the GPU: both forms timed
    # fp16's kept layers: asked, pinned {node: [TensorRT layers]}, unmatched, and the engine
    # inspector's {engine: {node: precision}, not_found}
    fp32_layers: dict[str, Any] | None = None
    # onnxruntime-gpu: {counts: {provider: nodes}, nodes: {node: provider}, missing_providers,
    # differs: {node: "predicted -> measured"}}, read from ORT's profiling on the host
    placement: dict[str, Any] | None = None
    # a decoder's generation on the board, {"prompts": [per prompt length: prompt_tokens,
    # time_to_first_token_ms, decode_steps, decode_tokens_per_s, kv_cache_bytes,
    # kv_cache_share_of_memory, power_mean_mw (NVML), tokens_per_s_per_watt, tegrastats (its raw
    # lines), error (a step the engine or the model refused)]}
    generation: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def verified(self) -> bool:
        return self.status == BuildStatus.VERIFIED_ON_DEVICE

    @classmethod
    def from_dict(cls, data: Any, source: str = "the device result") -> DeviceResult:
        """The result checked against its schema; any problem is one line (NotADeviceResult)."""
        if not isinstance(data, dict):
            raise NotADeviceResult(f"{source}: not a device result (a JSON object was expected)")
        missing = [key for key in REQUIRED if key not in data]
        if missing:
            raise NotADeviceResult(f"{source}: not a device result (no {', '.join(missing)})")
        schema = data["schema"]
        if not isinstance(schema, int) or isinstance(schema, bool):
            raise NotADeviceResult(f"{source}: not a device result "
                                   f"(schema {schema!r} is not a version number)")
        if schema > RESULT_SCHEMA:
            raise NotADeviceResult(f"{source}: result schema {schema} is newer than this deploycc reads "
                                   f"({RESULT_SCHEMA})", hint="upgrade deploycc here, then import again")
        wrong = problem(data, RESULT_SPEC)  # every field the host reads, typed
        if wrong:
            raise NotADeviceResult(f"{source}: not a device result: {wrong}")
        wrong = problem(data, VERIFIED_SPEC) if data["status"] == BuildStatus.VERIFIED_ON_DEVICE else None
        if wrong:
            raise NotADeviceResult(f"{source}: not a verified device result: {wrong}")
        if data["status"] not in ON_DEVICE:
            raise NotADeviceResult(f"{source}: unknown status {data['status']!r}")
        if data["stage"] not in DEVICE_STAGES:
            raise NotADeviceResult(f"{source}: unknown stage {data['stage']!r}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "order"}
        try:
            result = from_dict(cls, {key: value for key, value in data.items() if key in known})
        except (TypeError, ValueError) as error:
            raise NotADeviceResult(f"{source}: not a device result ({error})") from None
        result.extra = {key: value for key, value in data.items() if key not in known}
        result.order = list(data)
        return result

    def to_dict(self) -> dict[str, Any]:
        """As the board wrote it (plus what the host added): its keys in their order."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("extra", "order")}
        values.update(self.extra)
        keys = [*self.order, *(key for key, value in values.items()
                               if key not in self.order and (value is not None or key in REQUIRED))]
        return {key: values[key] for key in keys if key in values}

    def fp32_layers_lines(self) -> list[str]:
        """The plan's fp32 layers against what the board made of them."""
        kept = self.fp32_layers or {}
        if not kept.get("asked"):
            return []
        asked = list(kept["asked"])
        lines = [f"fp32 layers: {len(asked)} asked"]
        if kept.get("note"):
            lines.append(f"{kept['note']}")
        if "pinned" in kept:
            lines.append(f"{len(kept['pinned'])} pinned to fp32 in the network"
                         + ("" if kept.get("obeyed", True) else
                            " (this TensorRT has no flag that obeys them)"))
        if kept.get("unmatched"):
            lines.append("no TensorRT layer came from " + ", ".join(kept["unmatched"]))
        inspector = kept.get("inspector")
        if inspector:
            engine = inspector.get("engine", {})
            # the runner writes TensorRT's precisions as strings; "unknown" where it could not read one
            wide = [node for node, precision in engine.items() if precision == Precision.FP32]
            half = sorted(node for node, precision in engine.items()
                          if node not in wide and precision != UNKNOWN_PRECISION)
            lines.append(f"the engine inspector: {len(wide)} in fp32"
                         + (f", not fp32 against the plan: {', '.join(half)}" if half else "")
                         + (", inside fused or Myelin layers it does not name: "
                            + ", ".join(inspector["not_found"])
                            if inspector.get("not_found") else ""))
        return lines
