"""report.md: what a person reads after a build, rendered from the same record as report.json:
a BuildReport (with the board's result once it is imported: `deploycc device import` renders it
again from the updated record), or a PartitionReport."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.report.export import dims_text, export_lines
from deploycc.report.skipped import skipped_section
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from deploycc.fp16 import HalfPrecisionReport
    from deploycc.quantize import QuantizeReport
    from deploycc.records.build import BuildReport
    from deploycc.records.device import DeviceResult
    from deploycc.records.legalize import LegalizeReport
    from deploycc.records.partition import PartitionReport
    from deploycc.records.precision import PrecisionChoice


def _ops(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items()) or "-"


def build_markdown(report: BuildReport) -> str:
    lines = _heading(report)
    lines += skipped_section(report.skipped_steps, report.strict)
    if report.export is not None:
        lines += export_lines(report.export)
    if report.shapes is not None and report.shapes.inputs:
        lines += _shapes(report)
    if report.legalize is not None:
        lines += _legalized(report.legalize)
    if report.precision_choice is not None:
        lines += _precision_choice(report.precision_choice)
    if report.quantization is not None:
        lines += _quantization(report.quantization)
    if report.half is not None:
        lines += half_section(report.half)
    if report.notes:
        lines += [f"- {note}" for note in report.notes] + [""]
    lines += _artifact(report)
    lines += _verification(report)
    lines += _benchmark(report)
    lines += _stages(report)
    lines += ["## Files", ""] + [f"- `{name}`" for name in report.files] + [""]
    if report.device is not None:
        lines += [*_device(report.device), ""]
    return "\n".join(lines)


def _stages(report: BuildReport) -> list[str]:
    """Each stage's time and this process's peak RSS during it."""
    if not report.seconds:
        return []
    lines = ["## Stages", "", "| stage | seconds | peak RSS (MiB, this process) |", "|---|---|---|"]
    for stage, seconds in report.seconds.items():
        peak = report.peak_rss_mib.get(stage)
        lines.append(f"| {stage} | {seconds:.2f} | {'' if peak is None else f'{peak:.0f}'} |")
    return [*lines, ""]


def _heading(report: BuildReport) -> list[str]:
    """The title, the status and the stage reached, what was built and what to do next."""
    return [f"# deploycc build: {report.target}", "",
            f"**Status: {report.status}** (stage reached: {report.stage}). {report.summary}", "",
            f"- model: `{report.model}`", f"- precision: {report.precision}",
            *([f"- build hash: `{report.build_hash}`"] if report.build_hash else []),  # none: nothing built
            f"- next step: {report.next_step}", ""]


def _legalized(legalized: LegalizeReport) -> list[str]:
    """What legalization did: each pass, the interface changes, the rewrites and their proofs, the
    passes blamed for a failed verification and the nodes still illegal."""
    lines = _passes(legalized)
    if legalized.signature_changes:
        lines += ["## Interface changed", ""] + [f"- {c}" for c in legalized.signature_changes] + [""]
    if legalized.rewrites:
        lines += _rewrites(legalized)
    if legalized.blame:
        lines += _blame(legalized)
    if legalized.unresolved:
        lines += ["## Still illegal", ""]
        lines += [f"- `{u.node}` ({u.op}): {'; '.join(u.reasons)}; {'; '.join(u.rules_tried)}"
                  for u in legalized.unresolved]
        lines.append("")
    return lines


def _passes(legalized: LegalizeReport) -> list[str]:
    """The model's opset and node count before and after, and each pass that ran."""
    lines = ["## Model before and after", "",
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
    lines += [f"- {note}" for note in legalized.notes] + ([""] if legalized.notes else [])
    return lines


def _rewrites(legalized: LegalizeReport) -> list[str]:
    lines = ["## Rewrites", "", "| rule | node | proof | max abs error | reference |",
             "|---|---|---|---|---|"]
    for rewrite in legalized.rewrites:
        cert = rewrite.certificate
        proof, error, runtime = ((cert.status, f"{cert.max_abs_error:.2e}", cert.reference) if cert
                                 else ("not proven", "", ""))
        lines.append(f"| {rewrite.rule} | {rewrite.node} | {proof} | {error} | {runtime} |")
    lines.append("")
    return lines


def _blame(legalized: LegalizeReport) -> list[str]:
    lines = ["## Blamed for a failed verification", "",
             "| pass | rule | output | what it changed | set aside |", "|---|---|---|---|---|"]
    lines += [f"| {b.pass_name} | {b.rule or '(the whole pass)'} | {b.output} | {b.problem} | "
              f"{'yes: the rest kept' if b.set_aside else 'no: the model as exported kept'} |"
              for b in legalized.blame]
    lines.append("")
    return lines


def _artifact(report: BuildReport) -> list[str]:
    """The files built, the commands that rebuild them and where the runtime places the nodes."""
    artifact = report.artifact
    if artifact is None:
        return []
    lines = ["## Artifact", "", f"{artifact.kind}: " + ", ".join(f"`{f}`" for f in artifact.files), ""]
    lines += [f"- {note}" for note in artifact.notes]
    for key in ("trtexec", "deploycc"):
        if key in artifact.settings:
            lines += ["", f"```sh\n{artifact.settings[key]}\n```"]
    if "python" in artifact.settings:  # the settings bench and run load it with
        lines += ["", "How to load it:", "", f"```python\n{artifact.settings['python']}\n```"]
    if artifact.placement is not None:
        placement = artifact.placement
        lines += ["", f"Placement ({placement.method}): "
                  + ", ".join(f"{device} {count}" for device, count in placement.counts.items())]
        if placement.fallback:
            lines.append(f"Fallback: {', '.join(placement.fallback[:20])}")
    lines.append("")
    return lines


def _verification(report: BuildReport) -> list[str]:
    """The engine's verification, or the legalized model's where no engine was verified; none: []."""
    legalized = report.legalize
    verification = report.verification or (legalized.verification if legalized is not None else None)
    if verification is None:
        return []
    verdict = "needs inputs" if verification.needs_inputs else \
        "passed" if verification.passed else "FAILED"
    what = "The engine" if report.verification is not None else "The legalized model"
    kept = f" (kept in `{verification.inputs_file}`)" if verification.inputs_file else ""
    lines = ["## Verification", "",
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
    if verification.generation is not None:
        generation = verification.generation
        lines += ["", f"Generation: {generation.line()} (the budget asks {generation.min_agreement:.0%} "
                      f"of the tokens): **{'passed' if generation.passed else 'FAILED'}**"]
    if verification.passed and verification.caveat():
        lines += ["", f"Caveat: {verification.caveat()}"]
    if verification.problem:
        lines += ["", f"Problem: {verification.problem}"]
    lines.append("")
    return lines


def _benchmark(report: BuildReport) -> list[str]:
    bench = report.benchmark
    if bench is None:
        return []
    return ["## Benchmark (summary; `deploycc bench` measures in full)", "",
            f"Timed on {dims_text(bench.input_shapes)}.", "",
            f"{bench.iterations} iterations after {bench.warmup} warm-up: p50 {bench.p50_ms:.3f} ms, "
            f"p90 {bench.p90_ms:.3f} ms, p99 {bench.p99_ms:.3f} ms, {bench.throughput_per_s:.1f}/s; "
            f"load {bench.load_ms:.1f} ms, first inference {bench.first_inference_ms:.3f} ms", ""]


def _precision_choice(choice: PrecisionChoice) -> list[str]:
    """--precision auto: every candidate, its speed against fp32 and its error, and the verdict."""
    shapes = ", ".join(f"{name} {dims}" for name, dims in choice.timed_at.items())
    lines = [f"## Precision: {choice.chosen} (--precision auto, {choice.seconds:.1f} s)", "",
             f"Budget: {choice.budget}." + (f" Timed at {shapes}{choice.timed_on}." if shapes else ""), "",
             "| precision | outcome | latency / fp32 (95% CI) | min cosine | max abs error | why |",
             "|---|---|---|---|---|---|"]
    for c in choice.candidates:
        interval = f" ({c.ci95[0]:.3f}-{c.ci95[1]:.3f})" if c.ci95 else ""
        ratio = "" if c.ratio is None else f"{c.ratio:.3f}{interval}"
        named = f"{c.precision} ({c.recipe})" if c.recipe else str(c.precision)
        lines.append(f"| {named} | {c.outcome} | {ratio} | {_shown(c.min_cosine)} | "
                     f"{_shown(c.max_abs_error)} | {c.why} |")
    return [*lines, ""]


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


def half_section(half: HalfPrecisionReport) -> list[str]:
    """fp16/bf16: the layers kept in fp32 and why, the predicted error, the flagged tensors."""
    lines = [f"## {half.precision.value}", "", f"**{half.line()}**", "",
             f"- {half.errors()}; judged at {half.tolerance.value} verification's tolerances",
             f"- emulated on ONNX Runtime CPU on {half.inputs}: {half.runs} run(s), {half.seconds:.1f} s, "
             f"{half.layers} layer(s) that compute float"]
    if half.reason and half.kept:
        lines.append(f"- {half.reason}")
    if half.flagged:
        lines += ["", "| tensor | written by | op | why | max abs | smallest nonzero |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {f.name} | {f.node or '(graph input)'} | {f.op} | {f.why} | {f.max_abs:.4g} | "
                  f"{f.min_abs_nonzero:.3g} |" for f in half.flagged]
    return [*lines, ""]


def _quantization(quantized: QuantizeReport) -> list[str]:
    """--precision int8: what was quantized how, the metric fp32 vs int8, each step of the guard."""
    verdict = f"**Built in {quantized.decision}**: {quantized.reason}."
    if quantized.required and quantized.decision != Precision.INT8:
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


def _shown(value: Any, absent: str = "") -> Any:
    """What the board wrote, or `absent` where it wrote nothing."""
    return absent if value is None else value


def _board_generation(generation: dict[str, Any]) -> list[str]:
    """A decoder's generation timed on the board, per prompt length: time to first token, decode
    tokens/s, the cache's bytes and share of memory, tokens/s per watt, or why a length stopped."""
    prompts = generation.get("prompts") or []
    if not prompts:
        return []
    lines = ["", "Generation on the device (the cache empty before each prompt, then single-token "
                 "steps):", "",
             "| prompt | time to first token ms | decode tokens/s | KV cache at the end | tokens/s per "
             "watt |", "|---|---|---|---|---|"]
    for timing in prompts:
        if timing.get("error") and timing.get("time_to_first_token_ms") is None:
            lines.append(f"| {timing['prompt_tokens']} | refused: {timing['error']} | | | |")
            continue
        share = timing.get("kv_cache_share_of_memory")
        cache = "" if timing.get("kv_cache_bytes") is None else (
            f"{timing['kv_cache_bytes'] / 2**20:.1f} MiB at {timing.get('context_tokens')} tokens"
            + (f" ({share:.2%} of memory)" if share is not None else ""))
        rail = f", {timing['power_rail']}" if timing.get("power_rail") else ""
        watt = "" if timing.get("tokens_per_s_per_watt") is None else \
            f"{timing['tokens_per_s_per_watt']} ({timing.get('power_mean_mw')} mW{rail})"
        stopped = f" (stopped after {timing.get('decode_steps')}: {timing['error']})" \
            if timing.get("error") else ""
        lines.append(f"| {timing['prompt_tokens']} | {timing.get('time_to_first_token_ms')} | "
                     f"{timing.get('decode_tokens_per_s', '')}{stopped} | {cache} | {watt} |")
    return lines


def _device(device: DeviceResult) -> list[str]:
    """The board's result (`deploycc device import`): its verification per output, latency,
    power, clocks and memory, each measurement it could not take said so."""
    lines = ["## On the device", "",
             f"**{device.status}** (stage {device.stage}) with {device.engine} "
             f"{_shown(device.engine_version)} on {_shown(device.host, '?')} "
             f"({_shown(device.machine, '?')}, Python {_shown(device.python, '?')})."]
    if device.reason:
        lines += ["", f"Reason: {device.reason}"]
    rows = device.outputs or []
    if rows:
        lines += ["", "| output | passed | max abs error | cosine |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {r['passed']} | {r.get('max_abs_error', '')} | {r.get('cosine', '')} |"
                  for r in rows]
    latency = device.latency
    if latency:
        runs = f" over {latency['iterations']} runs" if latency.get("iterations") else ""
        lines += ["", f"Latency: p50 {latency['p50_ms']} ms, p90 {latency['p90_ms']} ms, "
                      f"p99 {latency['p99_ms']} ms{runs}; {latency['throughput_per_s']}/s."]
    lines += _board_generation(device.generation or {})
    power = device.tegrastats_summary or {}
    if power:
        rails = ", ".join(f"{name} {mw} mW" for name, mw in (power.get("power_mean_mw") or {}).items())
        mode = device.power_mode or "power mode unknown"
        lines += ["", f"tegrastats ({power['samples']} samples, {mode}): "
                      f"GPU {power.get('gr3d_mean_percent')}% on average, "
                      f"RAM peak {power.get('ram_peak_mb')} MB"
                      + (f"; mean power {rails}" if rails else "") + "."]
    clocks = device.clocks or {}
    if clocks.get("jetson_clocks") is not None:
        lines += ["", "Clocks locked (jetson_clocks): timings are stable." if clocks["jetson_clocks"] else
                      f"Clocks not locked (CPU {clocks.get('cpu_locked')}, GPU {clocks.get('gpu_locked')}, "
                      f"GPU at {clocks.get('gpu_mhz')} MHz): run `sudo jetson_clocks` for stable timings."]
    nvml = device.nvml or {}
    if nvml.get("before") and nvml.get("after"):
        before, after = nvml["before"], nvml["after"]
        lines += ["", f"NVML: GPU memory {before['gpu_memory_used_kb']} kB before timing, "
                      f"{after['gpu_memory_used_kb']} kB after; power {after.get('power_mw')} mW."]
    placement = device.placement or {}
    if placement.get("counts"):
        measured = ", ".join(f"{provider} {count}" for provider, count in placement["counts"].items())
        differs = placement.get("differs") or {}
        lines += ["", f"Placement measured (ORT profiling): {measured}"
                      + (f"; providers this onnxruntime lacks: {', '.join(placement['missing_providers'])}"
                         if placement.get("missing_providers") else "")
                      + (f"; {len(differs)} node(s) not where predicted: "
                         + ", ".join(f"{n} ({w})" for n, w in list(differs.items())[:10])
                         if differs else "; every node where deploycc predicted it") + "."]
    kept = device.fp32_layers_lines()
    if kept:
        lines += ["", "; ".join(kept) + "."]
    memory = device.memory or {}
    if memory:
        rss, nvmap = memory.get("peak_rss_kb"), memory.get("nvmap_delta_kb")
        rss_text = f"{rss} kB" if rss is not None else "n/a (not measured off Linux)"
        nvmap_text = (f"{nvmap} kB" if nvmap is not None else
                      "n/a (no NvMapMemUsed in the board's /proc/meminfo: not a Jetson)")
        lines += ["", f"Memory: peak RSS {rss_text}, NvMap delta {nvmap_text}."]
    return lines


def flops_share(report: PartitionReport) -> str:
    """The device's share of one inference's FLOPs, in words."""
    if not report.flops:
        return f"FLOPs on the device: {report.device_flops_share:.1%}"
    return (f"FLOPs on the device: {report.device_flops_share:.1%} ({report.device_flops / 1e6:.2f} of "
            f"{report.flops / 1e6:.2f} MFLOPs per inference)")


def partition_markdown(report: PartitionReport) -> str:
    """report.md of a build with host segments: each segment, the device's share of the FLOPs,
    why each cut tensor crosses engines and each host node runs there, and the chain's two checks."""
    lines = [f"# {Path(report.model).name} on {report.target}, partitioned: {report.status}", "",
             report.summary, "", "| segment | placement | nodes | inputs | outputs | decision |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {s['index']} | {s['placement']} | {s['nodes']} | {', '.join(s['inputs'])} | "
              f"{', '.join(s['outputs'])} | {s['decision']} |" for s in report.segments]
    lines += ["", flops_share(report)]
    if report.cuts:
        lines += ["", "| cut tensor | shape | bytes | why it crosses engines |", "|---|---|---|---|"]
        lines += [f"| {c['name']} | {c['shape']} | {c['bytes']} | {c.get('reason', '')} |"
                  for c in report.cuts]
    if report.host_nodes:
        lines += ["", "Host nodes and why each runs there:", ""]
        lines += [f"- {node}: {'; '.join(why)}" for node, why in sorted(report.host_nodes.items())]
    for title, check in (("ONNX Runtime CPU", report.chain_on_ort), ("the engines", report.chain_on_engines)):
        if check is not None:
            lines += ["", f"Chain on {title}: {'passed' if check.passed else check.problem}"]
    lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines) + "\n"
