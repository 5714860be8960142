"""Tables for people (rich). Machines get `--json`, rendered from the same records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from deploycc.report.export import render_export
from deploycc.report.skipped import render_skipped
from deploycc.taxonomy import BuildStatus, Legality, ProofStatus, Severity

if TYPE_CHECKING:
    from deploycc.analysis.check import CheckReport, NodeGroup, TargetVerdict
    from deploycc.analysis.inspect import InspectReport
    from deploycc.bench.run import BenchReport
    from deploycc.fp16 import HalfPrecisionReport
    from deploycc.records.audit import AuditReport
    from deploycc.records.build import BuildReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.records.partition import PartitionReport
    from deploycc.records.targets import TargetListing
    from deploycc.targets.schema import Target
    from deploycc.verify.compare import OutputComparison

# The colour of a build's status: green where it deploys, yellow where the board has the last word.
STATUS_COLOURS = {BuildStatus.VERIFIED: "green", BuildStatus.PENDING_ON_DEVICE: "yellow"}

MAX_NODES_SHOWN = 6


# Off a terminal no width is imposed: a table takes its natural width, so no cell is folded or
# cut with "…" and `deploycc rules | grep com.microsoft` finds every row whole on its line.
PIPE_WIDTH = 1_000_000


def _console() -> Console:
    """On a terminal, rich's usual wrapping; in a pipe or a CI log, lines are not wrapped and
    tables not narrowed, so a command deploycc tells the user to run, or a table's row, stays on
    one line and can be copied or grepped whole."""
    if Console().is_terminal:
        return Console(highlight=False, soft_wrap=False)
    return Console(highlight=False, soft_wrap=True, width=PIPE_WIDTH)


def print_table(table: Table) -> None:
    """A table for people, on stdout: the terminal's width there, its natural width in a pipe."""
    _console().print(table)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _nodes(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NODES_SHOWN])
    return shown + (f", … (+{len(names) - MAX_NODES_SHOWN})" if len(names) > MAX_NODES_SHOWN else "")


def render_targets(listing: TargetListing) -> None:
    table = Table(title="deployment targets")
    for column in ("name", "backend", "version", "device", "opsets", "ops", "JetPack", "DLA"):
        table.add_column(column)
    for t in listing.targets:
        table.add_row(t.name, t.backend, t.backend_version, t.device,
                      f"{t.opset_min}..{t.opset_max} (pref {t.opset_preferred})",
                      str(t.supported_ops), t.jetpack or "-", str(t.dla_cores or "-"))
    _console().print(table)


def render_target(target: Target) -> None:
    out = _console()
    out.print(f"[bold]{target.name}[/bold]: {target.description}")
    if target.aliases:
        out.print(f"  aliases      {', '.join(target.aliases)}")
    out.print(f"  backend      {target.backend.kind} {target.backend.version}")
    device = f"{target.device.kind} {target.device.name}"
    if target.device.compute_capability:
        device += f" (compute capability {target.device.compute_capability})"
    out.print(f"  device       {device}")
    out.print(f"  opsets       {target.opset.min}..{target.opset.max}, preferred {target.opset.preferred}"
              + (f"  [{target.opset.statement}]" if target.opset.statement else ""))
    out.print(f"  op table     {target.ops.name}: {target.ops.count_supported()} supported ops "
              f"({target.ops.product} {target.ops.product_version})")
    src = target.ops.source
    if src.repo or src.url:
        pinned = src.commit or src.tag_or_branch or "?"
        out.print(f"  source       {src.repo or ''} {src.path or ''} @ {pinned}")
    if target.dtypes.unsupported:
        out.print(f"  no dtypes    {', '.join(target.dtypes.unsupported)}")
    for source, carried in target.dtypes.computed_as:
        out.print(f"  computes     {source} as {carried}")
    shape_note = f" ({target.shapes.note})" if target.shapes.note else ""
    out.print(f"  shapes       {target.shapes.policy}{shape_note}")
    out.print(f"  precisions   {', '.join(target.precision.supported)} (default {target.precision.default})")
    if target.memory.budget_mb or target.memory.workspace_mb:
        out.print(f"  memory       budget {target.memory.budget_mb or '-'} MB, "
                  f"workspace {target.memory.workspace_mb or '-'} MB")
    if target.dla is not None:
        dla_ops = target.dla.table.count_supported() if target.dla.table else 0
        out.print(f"  DLA          {target.dla.cores} cores, {', '.join(target.dla.precisions)}, "
                  f"{dla_ops} ops ({target.dla.table.name if target.dla.table else 'no table'})")
    if target.jetpack is not None:
        facts = ", ".join(f"{k}={v}" for k, v in target.jetpack.facts)
        out.print(f"  JetPack      {target.jetpack.release} ({facts}); "
                  f"available: {', '.join(target.jetpack.available)}")
    out.print(f"  spec hash    {target.spec_hash[:16]}")
    out.print(f"  file         {target.source_file}")
    restricted = [e for e in target.ops.entries if e.restrictions or e.status != "supported"]
    if restricted:
        table = Table(title="ops with restrictions or without support")
        for column in ("op", "status", "restriction / note"):
            table.add_column(column)
        for entry in restricted:
            label = entry.op if not entry.domain else f"{entry.domain}::{entry.op}"
            text = "; ".join(entry.restrictions) or entry.note or ""
            table.add_row(label, entry.status, text)
        out.print(table)


def render_inspect(report: InspectReport) -> None:
    out = _console()
    out.print(f"[bold]{report.path}[/bold]  ({_size(report.file_size_bytes)})")
    opsets = ", ".join(f"{k} {v}" for k, v in report.opset_imports.items())
    out.print(f"  IR version {report.ir_version}; opsets {opsets}; producer {report.producer or '-'}")
    io_table = Table(title="inputs and outputs")
    for column in ("", "name", "dtype", "dims"):
        io_table.add_column(column)
    for kind, values in (("in", report.inputs), ("out", report.outputs)):
        for value in values:
            dims = value["dims"]
            io_table.add_row(kind, str(value["name"]), str(value["dtype"]),
                             "?" if dims is None else "x".join(str(d) for d in dims) or "scalar")
    out.print(io_table)
    out.print(f"  nodes {report.node_count} ({report.main_graph_node_count} in the main graph, "
              f"{report.subgraph_count} subgraphs)"
              + (f"; control flow {report.control_flow_nodes}" if report.control_flow_nodes else ""))
    out.print(f"  parameters {report.parameter_count:,} in {report.initializer_count} initializers "
              f"({_size(report.parameter_bytes)})")
    for item in report.external_data:
        out.print(f"  external data {item['location']}: {_size(item['size_bytes'])}, "
                  f"{item['tensors']} tensors")
    histogram = Table(title="op histogram")
    histogram.add_column("op")
    histogram.add_column("count", justify="right")
    for op, count in report.op_histogram.items():
        histogram.add_row(op, str(count))
    out.print(histogram)
    if report.findings:
        findings = Table(title="redundancy")
        for column in ("finding", "count", "what", "nodes"):
            findings.add_column(column)
        for finding in report.findings:
            findings.add_row(finding.kind, str(finding.count), finding.detail, _nodes(finding.nodes))
        out.print(findings)
    else:
        out.print("  no redundancy found")
    for note in report.notes:
        out.print(f"  [yellow]note[/yellow]: {note}")


def _group_table(title: str, groups: list[NodeGroup]) -> Table:
    table = Table(title=title)
    for column in ("op", "count", "reason", "nodes"):
        table.add_column(column)
    for group in groups:
        table.add_row(group.op, str(group.count), group.reason, _nodes(group.nodes))
    return table


def _render_verdict(out: Console, verdict: TargetVerdict) -> None:
    status = "[green]legal[/green]" if verdict.legal else "[red]illegal[/red]"
    jetpack = f", JetPack {verdict.jetpack}" if verdict.jetpack else ""
    counts = verdict.counts
    out.print(f"[bold]{verdict.target}[/bold] ({verdict.backend} {verdict.backend_version}{jetpack}): "
              f"{status}: {counts[Legality.LEGAL]} legal, {counts[Legality.CONDITIONAL]} conditional, "
              f"{counts[Legality.ILLEGAL]} illegal")
    if verdict.illegal:
        out.print(_group_table(f"illegal on {verdict.target}", verdict.illegal))
    for finding in verdict.graph_findings:
        colour = "red" if finding.severity == Severity.ILLEGAL else "yellow"
        out.print(f"  [{colour}]{finding.severity}[/{colour}] ({finding.category}): {finding.message}")
    if verdict.fixes:
        table = Table(title=f"what legalize would do on {verdict.target}")
        for column in ("node", "op", "fix"):
            table.add_column(column)
        for fix in verdict.fixes:
            table.add_row(fix["node"], fix["op"],
                          f"[green]{fix['fix']}[/green]" if fix["fix"]
                          else f"[red]{fix['explanation']}[/red]")
        out.print(table)
    if verdict.placement is not None:
        placement = verdict.placement
        out.print(escape(f"  placement predicted: {placement.line()}"))
        for item in placement.off_primary[:10]:
            provider = item.provider.removesuffix("ExecutionProvider")
            out.print(escape(f"    {item.node} ({item.op}) -> {provider}"
                             + (f": {item.reason}" if item.reason else "")))
        if len(placement.off_primary) > 10:
            out.print(f"    and {len(placement.off_primary) - 10} more off the primary provider "
                      "(--json lists all)")
    if verdict.dla is not None:
        out.print(f"  DLA: {len(verdict.dla['dla'])} nodes on DLA, "
                  f"{len(verdict.dla['gpu-fallback'])} fall back to the GPU, "
                  f"{len(verdict.dla['uncertain'])} uncertain")


def render_check(report: CheckReport) -> None:
    out = _console()
    out.print(f"[bold]{report.path}[/bold]: {report.node_count} nodes, opsets "
              + ", ".join(f"{k} {v}" for k, v in report.opset_imports.items()))
    for note in report.notes:
        out.print(f"  [yellow]note[/yellow]: {note}")
    if len(report.targets) > 1:
        out.print(_matrix(report))
    for verdict in report.targets:
        _render_verdict(out, verdict)
    if report.half is not None:
        render_half(out, report.half)
    render_skipped(out, report.skipped_steps, report.strict)


def _matrix(report: CheckReport) -> Table:
    """op × target: how many nodes of the op each target refuses ('ok' when none)."""
    ops: dict[str, dict[str, int]] = {}
    for verdict in report.targets:
        for group in verdict.illegal:
            ops.setdefault(group.op, {})
            ops[group.op][verdict.target] = ops[group.op].get(verdict.target, 0) + group.count
    table = Table(title="illegal nodes per op and target")
    table.add_column("op")
    for verdict in report.targets:
        table.add_column(verdict.target, justify="center")
    for op in sorted(ops):
        table.add_row(op, *[str(ops[op].get(v.target, "ok")) for v in report.targets])
    table.add_row("[bold]verdict[/bold]",
                  *["[green]legal[/green]" if v.legal else "[red]illegal[/red]" for v in report.targets])
    return table


def render_legalize(report: LegalizeReport) -> None:
    out = _console()
    if report.export is not None:
        render_export(out, report.export)
    out.print(f"[bold]{report.source}[/bold] -> {report.target} (mode {report.mode}): opset "
              f"{report.opset['before']} -> {report.opset['after']}, nodes {report.nodes['before']} -> "
              f"{report.nodes['after']} in {report.seconds:.2f} s")
    passes = Table(title="passes")
    for column in ("pass", "time (s)", "nodes", "removed", "added", "notes"):
        passes.add_column(column)
    for record in report.passes:
        if not record.ran:
            continue
        nodes = f"{record.nodes_before} -> {record.nodes_after}"
        passes.add_row(record.name, f"{record.seconds:.3f}", nodes,
                       _histogram(record.ops_removed), _histogram(record.ops_added), "; ".join(record.notes))
    out.print(passes)
    if report.rewrites:
        rewrites = Table(title="rewrites (each proven on ONNX Runtime CPU)")
        for column in ("rule", "node", "proof", "max abs err", "reference"):
            rewrites.add_column(column)
        for rewrite in report.rewrites:
            cert = rewrite.certificate
            status = cert.status if cert else "not proven (--no-prove)"
            colours: dict[str, str] = {ProofStatus.PROVEN: "green", ProofStatus.FAILED: "red"}
            colour = colours.get(status, "yellow")
            rewrites.add_row(rewrite.rule, rewrite.node, f"[{colour}]{status}[/{colour}]",
                             f"{cert.max_abs_error:.2e}" if cert else "", cert.reference if cert else "")
        out.print(rewrites)
    for change in report.signature_changes:
        out.print(f"  [yellow]interface changed[/yellow]: {change}")
    for item in report.unresolved:
        out.print(f"  [red]still illegal[/red] {item.node} ({item.op}): {'; '.join(item.reasons)}; "
                  f"{'; '.join(item.rules_tried)}")
    verification = report.verification
    if verification is not None:
        for output in verification.outputs:
            mark = _mark(output, verification.ill_conditioned)
            out.print(f"  verify {output.name}: {mark} max abs {output.max_abs_error:.2e}, max rel "
                      f"{output.max_rel_error:.2e}, cosine {output.cosine_similarity:.6f}, needs atol "
                      f"{output.required_atol:.1e} / rtol {output.required_rtol:.1e}")
        if verification.generation is not None:
            out.print(f"  verify {escape(verification.generation.line())}")
        if verification.passed and verification.caveat():
            out.print(f"  [yellow]verified with a caveat[/yellow]: {verification.caveat()}")
        if verification.problem:
            out.print(f"  [red]verification failed[/red]: {verification.problem}")
    for blame in report.blame:
        what = "set aside" if blame.set_aside else "blamed"
        out.print(f"  [yellow]{what}[/yellow]: {escape(str(blame))}"
                  + (f" (output {blame.output})" if blame.output else ""))
    for note in report.notes:
        out.print(f"  [yellow]note[/yellow]: {note}")
    colour = "green" if report.success else "red"
    out.print(f"[{colour}]{report.summary}[/{colour}]")


def _mark(output: OutputComparison, ill_conditioned: list[str]) -> str:
    if output.passed and output.degenerate:  # a match on an output that says nothing proves little
        return f"[yellow]not judged ({escape(output.degenerate)})[/yellow]"
    if output.passed:
        return "[green]ok[/green]"
    return "[yellow]ill-conditioned[/yellow]" if output.name in ill_conditioned else "[red]FAIL[/red]"


def _histogram(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items())


def render_half(out: Console, half: HalfPrecisionReport) -> None:
    """fp16: the layers kept in fp32, the predicted error with and without them, what overflows."""
    out.print(escape(f"  {half.line()}; {half.errors()} ({half.runs} emulation run(s), "
                     f"{half.seconds:.1f} s)"))
    for flag in half.flagged[:5]:
        out.print(escape(f"    flagged {flag}"), style="yellow")
    if len(half.flagged) > 5:
        out.print(f"    and {len(half.flagged) - 5} more flagged tensor(s) in report.json")


def render_build(report: BuildReport) -> None:
    out = _console()
    colour = STATUS_COLOURS.get(report.status, "red")
    out.print(f"[bold]{report.model}[/bold] -> {report.target} ({report.precision}): "
              f"[{colour}]{report.status}[/{colour}] (stage {report.stage})")
    if report.export is not None:
        render_export(out, report.export)
    legalized = report.legalize
    if legalized is not None:
        out.print(f"  legalize: opset {legalized.opset['before']} -> {legalized.opset['after']}, nodes "
                  f"{legalized.nodes['before']} -> {legalized.nodes['after']}, "
                  f"{len(legalized.rewrites)} rewrite(s) proven")
        for note in legalized.notes:  # what reading or legalizing the model had to do about it
            out.print(f"  [yellow]{escape(note)}[/yellow]")
        for change in legalized.signature_changes:
            out.print(f"  [yellow]interface changed[/yellow]: {change}")
        for item in legalized.unresolved:
            out.print(f"  [red]still illegal[/red] {item.node} ({item.op}): {'; '.join(item.reasons)}")
    quantized = report.quantization
    if quantized is not None:
        speed = f", {quantized.speed_text}" if quantized.speed is not None else ""
        out.print(f"  int8: {quantized.metric} {quantized.int8_metric:.4f} vs fp32 "
                  f"{quantized.fp32_metric:.4f} (budget {quantized.max_drop}){speed}, "
                  f"{len(quantized.kept_float)} layer(s) kept in float")
    if report.half is not None:
        render_half(out, report.half)
    if report.shapes is not None and report.shapes.inputs:
        out.print(escape(f"  shapes: the engine takes {report.shapes.line()} (change with "
                         f"{report.shapes.change_with})"))
    for note in report.notes:
        out.print(f"  [yellow]{escape(note)}[/yellow]")
    if report.artifact is not None:
        out.print(f"  artifact: {report.artifact.kind}: {', '.join(report.artifact.files)}")
        for note in report.artifact.notes:
            out.print(f"  [yellow]{note}[/yellow]")
    verification = report.verification or (legalized.verification if legalized is not None else None)
    if verification is not None:
        where = "engine" if report.verification is not None else "legalized model"
        out.print(escape(f"  verified the {where} on {verification.inputs}"
                         + (f", kept in {verification.inputs_file}" if verification.inputs_file else "")))
        for output in verification.outputs:
            mark = _mark(output, verification.ill_conditioned)
            out.print(f"  verify {output.name}: {mark} max abs {output.max_abs_error:.2e}, cosine "
                      f"{output.cosine_similarity:.6f}")
        if verification.generation is not None:
            mark = "ok" if verification.generation.passed else "[red]FAIL[/red]"
            out.print(f"  verify {escape(verification.generation.line())}: {mark}")
        if verification.passed and verification.caveat():
            out.print(escape(f"  verified with a caveat: {verification.caveat()}"), style="yellow")
    if report.benchmark is not None:
        bench = report.benchmark
        timed = ", ".join(f"{name} {'x'.join(map(str, dims)) or 'scalar'}"
                          for name, dims in bench.input_shapes.items())
        out.print(f"  latency: p50 {bench.p50_ms:.3f} ms, p99 {bench.p99_ms:.3f} ms, "
                  f"{bench.throughput_per_s:.1f}/s, timed on {timed}")
    out.print(f"[{colour}]{report.summary}[/{colour}]")
    render_skipped(out, report.skipped_steps, report.strict)
    out.print(f"  next: {report.next_step}")
    out.print(f"  {report.outdir}/report.md")


def render_partition(report: PartitionReport) -> None:
    from deploycc.report.markdown import flops_share

    out = _console()
    colour = STATUS_COLOURS.get(report.status, "red")
    out.print(f"[bold]{report.model}[/bold] -> {report.target}, partitioned: "
              f"[{colour}]{report.status}[/{colour}]")
    for segment in report.segments:
        out.print(f"  segment {segment['index']} ({segment['placement']}): {segment['nodes']} node(s), "
                  f"reads {', '.join(segment['inputs'])}; {segment['decision']}")
    for node, why in sorted(report.host_nodes.items()):
        out.print(f"  host {node}: {'; '.join(why)}")
    for cut in report.cuts:
        if cut.get("reason"):
            out.print(escape(f"  cut {cut['name']} {cut['shape']}: {cut['reason']}"))
    out.print(f"  {flops_share(report)}")
    for title, check in (("ONNX Runtime CPU", report.chain_on_ort), ("the engines", report.chain_on_engines)):
        if check is not None:
            mark = "[green]passed[/green]" if check.passed else f"[red]{check.problem}[/red]"
            out.print(f"  chain on {title}: {mark}")
    for note in report.notes:
        out.print(f"  [yellow]{note}[/yellow]")
    out.print(f"[{colour}]{report.summary}[/{colour}]")
    out.print(f"  {report.outdir}/report.md")


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.1f} MiB"


def render_bench(report: BenchReport) -> None:
    def shapes(inputs: dict[str, list[int]]) -> str:  # every timing states the shapes it ran
        return escape(", ".join(f"{name} {dims}" for name, dims in inputs.items()) or "none")

    out = _console()
    out.print(f"[bold]{escape(report.subject)}[/bold] on {report.target} ({report.artifact}), inputs "
              + shapes(report.input_shapes))
    lat = report.latency
    table = Table(title=f"latency over {lat.iterations} runs (ms)")
    for column in ("min", "mean", "std", "p50", "p90", "p95", "p99", "max", "runs/s"):
        table.add_column(column, justify="right")
    table.add_row(*(f"{v:.3f}" for v in (lat.min_ms, lat.mean_ms, lat.std_ms, lat.p50_ms, lat.p90_ms,
                                          lat.p95_ms, lat.p99_ms, lat.max_ms)), f"{lat.throughput_per_s:.1f}")
    out.print(table)
    if report.segments_ms:
        out.print("  per segment (mean ms, inputs handed over included): "
                  + ", ".join(f"{name} {ms:.3f}" for name, ms in report.segments_ms.items()))
    warm = report.warmup
    out.print(f"  load {report.load_ms:.1f} ms, first inference {report.first_inference_ms:.3f} ms, warm-up "
              f"{warm.iterations} runs ({'stable' if warm.stable else 'not stable'}, CV {warm.final_cv:.1%})")
    if report.batches:
        sweep = Table(title="batch sweep")
        for column in ("batch", "p50 ms", "p99 ms", "items/s"):
            sweep.add_column(column, justify="right")
        sweep.add_column("inputs")
        for item in report.batches:
            sweep.add_row(str(item.batch), f"{item.latency.p50_ms:.3f}", f"{item.latency.p99_ms:.3f}",
                          f"{item.items_per_s:.1f}", shapes(item.input_shapes))
        out.print(sweep)
    if report.throughput is not None:
        t = report.throughput
        out.print(f"  throughput: {t.inferences_per_s:.1f} inferences/s with {t.streams} streams "
                  f"({t.method})")
    memory = report.memory
    device = (f"{_mib(memory.device_memory_bytes)} ({memory.device_memory_method})"
              if memory.device_memory_bytes is not None else f"n/a ({memory.device_memory_unavailable})")
    out.print(escape(f"  memory: peak RSS {_mib(memory.peak_rss_bytes)} (+{_mib(memory.increment_rss_bytes)} "
                     f"over the pre-load baseline; {memory.rss_method}); device: {device}"))
    roof = report.roofline
    uncounted = f" (uncounted ops: {', '.join(roof.uncounted_ops)})" if roof.uncounted_ops else ""
    out.print(f"  compute: {roof.flops / 1e9:.3f} GFLOP per inference, {roof.gflops_per_s_at_p50} GFLOP/s "
              f"at p50{uncounted}")
    if report.comparison is not None:
        c = report.comparison
        out.print(f"  vs {escape(c.other)}: median {c.median_ms:.3f} ms vs {c.other_median_ms:.3f} ms: "
                  f"{escape(c.verdict(report.subject))}; "
                  f"{c.pairs} {c.order} pairs, both on inputs {shapes(c.input_shapes)}")
    if report.generation is not None:
        generation = report.generation
        out.print(f"  generation (batch {generation.batch}, greedy, median of {generation.repeats}):")
        for line in report.generation.lines():
            out.print(escape(f"    {line}"))
    out.print(escape("  conditions: " + ", ".join(f"{k}={v}" for k, v in report.conditions.items())))
    for warning in report.warnings:
        out.print(f"  [yellow]warning[/yellow]: {escape(warning)}")


def render_audit(report: AuditReport) -> None:
    out = _console()
    out.print(f"[bold]audit[/bold]: {len(report.models)} model(s) x {len(report.targets)} target(s), "
              f"{len(report.cells)} cells ({report.reused} reused) in {report.seconds:.1f} s")
    table = Table(title="success rate per target")
    partitioned = any(s.with_host_segments for s in report.summary)
    columns = ["target", "cells", "legal as exported", "after deploycc"]
    for column in columns + (["with host segments"] if partitioned else []) + ["regressed"]:
        table.add_column(column)
    for s in report.summary:
        both = s.succeeded + s.with_host_segments
        host = [f"{both} ({both / (s.cells or 1):.0%}; +{s.with_host_segments})"] if partitioned else []
        table.add_row(s.target, str(s.cells), f"{s.legal_as_exported} ({s.rate_as_exported:.0%})",
                      f"{s.succeeded} ({s.rate_after_deploycc:.0%})", *host,
                      f"[bold red]{s.regressed}[/bold red]" if s.regressed else "0")
    out.print(table)
    for cell in [c for c in report.cells if c.regressed]:
        out.print(escape(f"  regressed (worse than as exported; a deploycc bug): "
                         f"{cell.model} @ {cell.target}: {cell.message}"), style="red")
    for item in report.top_failures[:5]:
        out.print(escape(f"  {item['cause']} at {item['stage']}: {item['count']} cell(s)"))
    out.print(f"  reports: {report.outdir}/audit.html, audit.md, audit.json")
