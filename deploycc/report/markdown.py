"""report.md: what a person reads after a build, rendered from the same BuildReport as report.json."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploycc.pipeline.build import BuildReport


def _ops(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items()) or "-"


def build_markdown(report: BuildReport) -> str:
    lines = [f"# deploycc build: {report.target}", "",
             f"**Status: {report.status}** (stage reached: {report.stage}). {report.summary}", "",
             f"- model: `{report.model}`", f"- precision: {report.precision}",
             f"- build hash: `{report.build_hash}`", f"- next step: {report.next_step}", ""]
    legalized = report.legalize
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
    verification = report.verification
    if verification is not None:
        lines += ["## Verification", "",
                  f"Against the original on {verification.reference}, inputs {verification.inputs}, "
                  f"{verification.precision} tolerances: **{'passed' if verification.passed else 'FAILED'}**",
                  "", "| output | passed | max abs | max rel | cosine | needs atol | needs rtol |",
                  "|---|---|---|---|---|---|---|"]
        for output in verification.outputs:
            passed = "yes" if output.passed else \
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
                  f"{bench.iterations} iterations after {bench.warmup} warm-up: p50 {bench.p50_ms:.3f} ms, "
                  f"p90 {bench.p90_ms:.3f} ms, p99 {bench.p99_ms:.3f} ms, {bench.throughput_per_s:.1f}/s; "
                  f"load {bench.load_ms:.1f} ms, first inference {bench.first_inference_ms:.3f} ms", ""]
    lines += ["## Files", ""] + [f"- `{name}`" for name in report.files] + [""]
    return "\n".join(lines)
