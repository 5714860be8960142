"""report.md: what a person reads after a build, rendered from the same BuildReport as report.json."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploycc.pipeline.build import BuildReport
    from deploycc.quantize import QuantizeReport


def _ops(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items()) or "-"


def build_markdown(report: BuildReport) -> str:
    lines = [f"# deploycc build: {report.target}", "",
             f"**Status: {report.status}** (stage reached: {report.stage}). {report.summary}", "",
             f"- model: `{report.model}`", f"- precision: {report.precision}",
             f"- build hash: `{report.build_hash}`", f"- next step: {report.next_step}", ""]
    legalized = report.legalize
    if report.shapes is not None and report.shapes.inputs:
        lines += _shapes(report)
    if legalized is not None:
        lines += ["## Model before and after", "",
                  f"opset {legalized.opset['before']} -> {legalized.opset['after']}, "
                  f"nodes {legalized.nodes['before']} -> {legalized.nodes['after']}", "",
                  "| pass | seconds | nodes | removed | added | notes |", "|---|---|---|---|---|---|"]
        for record in legalized.passes:
            if record.ran:
                nodes = f"{record.nodes_before} -> {record.nodes_after}"
                lines.append(f"| {record.name} | {record.seconds:.3f} | {nodes} | "
                             f"{_ops(record.ops_removed)} | {_ops(record.ops_added)} | "
                             f"{'; '.join(record.notes)} |")
        lines.append("")
        if legalized.signature_changes:
            lines += ["## Interface changed", ""] + [f"- {c}" for c in legalized.signature_changes] + [""]
        if legalized.rewrites:
            lines += ["## Rewrites", "", "| rule | node | proof | max abs error | reference |",
                      "|---|---|---|---|---|"]
            for rewrite in legalized.rewrites:
                cert = rewrite.certificate
                proof, error, runtime = ((cert.status, f"{cert.max_abs_error:.2e}", cert.reference) if cert
                                         else ("not proven", "", ""))
                lines.append(f"| {rewrite.rule} | {rewrite.node} | {proof} | {error} | {runtime} |")
            lines.append("")
        if legalized.unresolved:
            lines += ["## Still illegal", ""]
            lines += [f"- `{u.node}` ({u.op}): {'; '.join(u.reasons)}; {'; '.join(u.rules_tried)}"
                      for u in legalized.unresolved]
            lines.append("")
    if report.quantization is not None:
        lines += _quantization(report.quantization)
    if report.notes:
        lines += [f"- {note}" for note in report.notes] + [""]
    artifact = report.artifact
    if artifact is not None:
        lines += ["## Artifact", "", f"{artifact.kind}: " + ", ".join(f"`{f}`" for f in artifact.files), ""]
        lines += [f"- {note}" for note in artifact.notes]
        for key in ("trtexec", "deploycc"):
            if key in artifact.settings:
                lines += ["", f"```sh\n{artifact.settings[key]}\n```"]
        if artifact.placement is not None:
            placement = artifact.placement
            lines += ["", f"Placement ({placement.method}): "
                      + ", ".join(f"{device} {count}" for device, count in placement.counts.items())]
            if placement.fallback:
                lines.append(f"Fallback: {', '.join(placement.fallback[:20])}")
        lines.append("")
    verification = report.verification or (legalized.verification if legalized is not None else None)
    if verification is not None:
        verdict = "needs inputs" if verification.needs_inputs else \
            "passed" if verification.passed else "FAILED"
        what = "The engine" if report.verification is not None else "The legalized model"
        kept = f" (kept in `{verification.inputs_file}`)" if verification.inputs_file else ""
        lines += ["## Verification", "",
                  f"{what} against the original on {verification.reference}, inputs "
                  f"{verification.inputs}{kept}, {verification.precision} tolerances: **{verdict}**",
                  "", "| output | passed | max abs | max rel | cosine | needs atol | needs rtol |",
                  "|---|---|---|---|---|---|---|"]
        for output in verification.outputs:
            passed = f"not judged ({output.degenerate})" if output.passed and output.degenerate else \
                "yes" if output.passed else \
                "ill-conditioned" if output.name in verification.ill_conditioned else "NO"
            lines.append(f"| {output.name} | {passed} | {output.max_abs_error:.2e} | "
                         f"{output.max_rel_error:.2e} | {output.cosine_similarity:.6f} | "
                         f"{output.required_atol:.1e} | {output.required_rtol:.1e} |")
        if verification.passed and verification.caveat():
            lines += ["", f"Caveat: {verification.caveat()}"]
        if verification.problem:
            lines += ["", f"Problem: {verification.problem}"]
        lines.append("")
    bench = report.benchmark
    if bench is not None:
        lines += ["## Benchmark (summary; `deploycc bench` measures in full)", "",
                  f"Timed on {_dims(bench.input_shapes)}.", "",
                  f"{bench.iterations} iterations after {bench.warmup} warm-up: p50 {bench.p50_ms:.3f} ms, "
                  f"p90 {bench.p90_ms:.3f} ms, p99 {bench.p99_ms:.3f} ms, {bench.throughput_per_s:.1f}/s; "
                  f"load {bench.load_ms:.1f} ms, first inference {bench.first_inference_ms:.3f} ms", ""]
    lines += ["## Files", ""] + [f"- `{name}`" for name in report.files] + [""]
    return "\n".join(lines)


def _dims(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"`{name}` {'x'.join(map(str, dims)) or 'scalar'}"
                     for name, dims in shapes.items()) or "-"


def _shapes(report: BuildReport) -> list[str]:
    """What each input is built for, verified and timed at, and where each size came from."""
    assert report.shapes is not None
    lines = ["## Shapes", "", "| input | as exported | the engine takes | verified and timed at |",
             "|---|---|---|---|"]
    for item in report.shapes.inputs:
        exported = "x".join(map(str, item.exported)) or "scalar"
        sample = "x".join(map(str, item.sample)) or "scalar"
        lines.append(f"| `{item.input}` | {exported} | {item.accepts} | {sample} |")
    lines += [""] + [f"- {how}" for item in report.shapes.inputs for how in item.how]
    lines += [f"- {note}" for note in report.shapes.notes]
    lines += [f"- change them with {report.shapes.change_with}", ""]
    return lines


def _quantization(quantized: QuantizeReport) -> list[str]:
    """--precision int8: what was quantized how, the metric fp32 vs int8, each step of the guard."""
    verdict = f"**Built in {quantized.decision}**: {quantized.reason}."
    if quantized.required and quantized.decision != "int8":
        verdict = (f"**Not built: int8 was required (--require-int8) and the guard kept "
                   f"{quantized.decision}**: {quantized.reason}.")
    lines = ["## INT8", "", verdict, "",
             f"- method: {quantized.method}",
             f"- samples: {quantized.calibration_samples} to calibrate, "
             f"{quantized.validation_samples} to judge",
             f"- {quantized.metric}: fp32 {quantized.fp32_metric:.4f}, int8 {quantized.int8_metric:.4f} "
             f"(drop {quantized.drop:.4f}, budget {quantized.max_drop})"]
    if quantized.speed is not None:
        lines.append(f"- speed: {quantized.speed_text}; medians fp32 {quantized.fp32_latency_ms} ms, "
                     f"int8 {quantized.int8_latency_ms} ms")
    for name, latency in quantized.default_precision_latency_ms.items():
        lines.append(f"- {name} without INFERENCE_PRECISION_HINT (the CPU's default precision): {latency} ms "
                     "(median of a second interleaved race)")
    if quantized.kept_float:
        lines.append(f"- kept in float ({len(quantized.kept_float)}): "
                     + ", ".join(f"`{name}`" for name in quantized.kept_float[:30]))
    if quantized.calibration_cache:
        lines.append(f"- TensorRT calibration cache: `{quantized.calibration_cache}`")
    lines += [f"- {note}" for note in quantized.notes]
    if len(quantized.steps) > 1:
        lines += ["", "| step | kept in float | metric | drop | within budget |", "|---|---|---|---|---|"]
        for index, step in enumerate(quantized.steps):
            lines.append(f"| {index} | {len(step['kept_float'])} | {step['int8']:.4f} | {step['drop']:.4f} | "
                         f"{'yes' if step['within_budget'] else 'no'} |")
    return [*lines, ""]
