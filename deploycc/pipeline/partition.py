"""`deploycc build --partition`: what no rule makes legal runs on the host.

    OUTDIR/model.legalized.onnx        every rewrite applied (mode partial: illegal nodes kept)
    OUTDIR/segments/pipeline.json      the segments in order and every cut tensor
    OUTDIR/segments/segment-NN-*.onnx  each segment as its own model
    OUTDIR/segments/NN/                each device segment's engine (or device bundle)
    OUTDIR/report.json, report.md

The chain is verified twice against the original: first every segment on ONNX Runtime CPU
(which isolates cutting bugs from engine differences), then with the built engines for the
device segments, with the precision's tolerances. Where the engine is built on the device
(TensorRT), the second check is pending there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import OptionError
from deploycc.options import BuildOptions
from deploycc.pipeline.build_stages import legalize_stage
from deploycc.pipeline.context import BuildContext
from deploycc.pipeline.stages import BuildStage, run_stages
from deploycc.records.partition import PartitionReport
from deploycc.taxonomy import WEIGHT_ONLY_BITS, BuildStatus, Legality, LegalizeMode, Precision

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.partition.plan import PartitionPlan
    from deploycc.targets.schema import Target

SEGMENTS = "segments"
VERIFIED, PENDING, FAILED = BuildStatus.VERIFIED, BuildStatus.PENDING_ON_DEVICE, BuildStatus.FAILED


def node_judge(model: ir.Model, target: Target) -> Callable[[ir.Node], list[str]]:
    """Why each top-level node is illegal on the target ([] = legal); a control-flow node is
    illegal when any node of its bodies is."""
    from deploycc.graph.graphs import all_graphs, opset_map
    from deploycc.legality.conversion_target import ConversionTarget

    judge, opsets = ConversionTarget(target), opset_map(model)

    def reasons(node: ir.Node) -> list[str]:
        found = []
        verdict = judge.judge(node, opsets)
        if verdict.status == Legality.ILLEGAL:
            found += [reason.summary for reason in verdict.reasons]
        for attr in node.attributes.values():
            bodies = attr.value if isinstance(attr.value, list) else [attr.value]
            for body in bodies:
                if not hasattr(body, "initializers"):
                    continue
                for graph in all_graphs(body):
                    found += [f"{inner.op_type} in a body: {reason.summary}" for inner in graph
                              for verdict in [judge.judge(inner, opsets, graph="body")]
                              if verdict.status == Legality.ILLEGAL for reason in verdict.reasons]
        return found

    return reasons


def _summary(plan: PartitionPlan, target: Target, pipeline: dict[str, Any]) -> str:
    device = [s for s in plan.segments if s.placement == "device"]
    host = [s for s in plan.segments if s.placement != "device"]
    total = sum(len(s.nodes) for s in plan.segments)
    cut_bytes = sum(c["bytes"] for c in pipeline["cuts"])
    return (f"{total} nodes: {sum(len(s.nodes) for s in device)} on {target.name} in {len(device)} "
            f"segment(s), {sum(len(s.nodes) for s in host)} on the host in {len(host)}; "
            f"{plan.device_flops_share:.1%} of FLOPs on the device; {len(pipeline['cuts'])} cut tensor(s), "
            f"{_size(cut_bytes)} per inference")


def _size(count: int) -> str:
    return f"{count / 1e6:.2f} MB" if count >= 100_000 else f"{count / 1e3:.1f} kB"


@dataclass
class PartitionContext(BuildContext):
    """A partitioned build's context: the build's, with the plan, the segments and their report."""

    report: PartitionReport | None = None
    plan: PartitionPlan | None = None
    pipeline: dict[str, Any] = field(default_factory=dict)  # segments/pipeline.json
    graph_model: ir.Model | None = None  # the legalized model, shapes inferred
    min_segment_nodes: int = 1
    flops_per_byte: float | None = None
    build_engines: bool = True
    runners: dict[int, Any] = field(default_factory=dict)  # each device segment's loaded engine
    pending: bool = False  # a device segment's engine is built on the device
    engines_failed: bool = False  # a device segment's engine did not build: the chain stays unverified

    def close(self) -> None:
        super().close()
        for runner in self.runners.values():
            runner.close()
        self.runners.clear()


def build_partitioned(model: str | Path, target: Target, outdir: str | Path,
                      options: BuildOptions | None = None, *, min_segment_nodes: int = 1,
                      flops_per_byte: float | None = None, build_engines: bool = True) -> PartitionReport:
    """`min_segment_nodes` and `flops_per_byte` (None: the plan's default) are the cost model's
    bounds for a device segment worth its launch; without `build_engines` the segments are written
    and verified on ONNX Runtime CPU only (`legalize --partition`)."""
    from deploycc import io
    from deploycc.backends.registry import get_backend
    from deploycc.pipeline.outcome import Clock
    from deploycc.pipeline.shape_policy import plan_shapes

    options = options or BuildOptions()
    # the caller's options stay as they were
    options = replace(options, legalize=replace(options.legalize, mode=LegalizeMode.PARTIAL))
    source, outdir = Path(model), Path(outdir)
    if min_segment_nodes < 1:
        raise OptionError("--min-segment-nodes must be at least 1")
    if options.precision in WEIGHT_ONLY_BITS:  # its stage list builds segments, not one quantized model
        raise OptionError(f"--partition does not build {options.precision} weight-only segments",
                          hint=f"build the whole model with --precision {options.precision}")
    with io.StagedDirectory(outdir, force=options.force, protect=(source,)) as staged:
        shapes, options = plan_shapes(source, target, options)  # the target's shape policy, as in `build`
        context = PartitionContext(
            source=source, target=target, options=options, staging=staged.staging,
            backend=get_backend(target.backend.kind), precision=options.effective_precision(target),
            clock=Clock({}, None), notes=[], shapes=shapes, min_segment_nodes=min_segment_nodes,
            flops_per_byte=flops_per_byte, build_engines=build_engines)
        run_stages(context, PARTITION_STAGES)
        assert context.report is not None
        if options.searches_precision:  # said, not silently dropped: the search builds whole models
            context.report.notes.append(f"--precision auto: {context.precision}, the target's default; a "
                                        "partitioned build does not search its segments' precision yet")
        _write(staged.staging, context.report)
        staged.commit()
    return context.report


def _legalize_stage(context: PartitionContext) -> None:
    """Legalize as `build` does, in partial mode; the report as it stands after, failed until the
    chain is verified."""
    legalize_stage(context)
    legalized = context.legalized
    assert legalized is not None
    context.report = PartitionReport(
        model=str(context.source), target=context.target.name, outdir=str(context.staging.parent),
        status=FAILED, summary=legalized.summary, precision=context.precision, segments=[], host_nodes={},
        cuts=[], device_flops_share=0.0, legalize=legalized, chain_on_ort=None, chain_on_engines=None)


def _plan_stage(context: PartitionContext) -> None:
    """Cut the legalized graph into device and host segments, and write each as its own model."""
    from deploycc.graph.shapes import load_inferred
    from deploycc.partition.plan import DEVICE, plan
    from deploycc.partition.segments import observe_cut_shapes, write_segments

    report = context.report
    assert report is not None
    graph_model = context.graph_model = load_inferred(context.legalized_path, check=False).model
    bounds = {"flops_per_byte": context.flops_per_byte} if context.flops_per_byte is not None else {}
    # TensorRT engines here are built for the shapes the axes pass fixed (profiles for graph inputs
    # only), so a cut tensor sized by the data keeps its reader on the host.
    partition = context.plan = plan(graph_model.graph, node_judge(graph_model, context.target),
                                    min_segment_nodes=context.min_segment_nodes,
                                    static_cuts=context.target.backend.fixed_shape_engines, **bounds)
    observed = observe_cut_shapes(graph_model, partition, context.inputs().feeds)
    if observed:
        report.notes.append(f"cut tensor(s) without inferred shape given the rank they run with: "
                            f"{', '.join(observed)}")
    pipeline = context.pipeline = write_segments(graph_model, partition, context.staging / SEGMENTS,
                                                 source=context.source.name, target=context.target.name)
    report.segments, report.cuts = pipeline["segments"], pipeline["cuts"]
    report.host_nodes = partition.host_reasons
    report.device_flops_share = partition.device_flops_share
    report.flops, report.device_flops = partition.flops, partition.device_flops
    report.summary = _summary(partition, context.target, pipeline)
    if not any(s.placement == DEVICE for s in partition.segments):
        report.notes.append(f"nothing runs on {context.target.name}: every node is on the host")


def _chain_on_ort_stage(context: PartitionContext) -> None:
    """Every segment on ONNX Runtime CPU against the original: isolates cutting bugs from engine
    differences. A chain ORT refuses ends the build (a cutting bug to report, not a crash)."""
    from deploycc.pipeline.build_stages import verification_precision
    from deploycc.runtime import Chain
    from deploycc.verify.verification import compare_all, reference_outputs

    report, legalized = context.report, context.legalized
    assert report is not None and legalized is not None
    drawn = context.inputs()
    expected, reference = reference_outputs(context.source, drawn.original_feeds)
    chain = Chain.load(context.staging / SEGMENTS)
    try:
        report.chain_on_ort = compare_all(expected, chain.run(drawn.feeds), reference=reference,
                                          inputs=drawn.described,
                                          precision=verification_precision(legalized, Precision.FP32))
    except Exception as error:
        report.notes.append(f"the chain did not run on ONNX Runtime: {str(error).splitlines()[0]}")
        context.stop()
    finally:
        chain.close()


def _segment_engines_stage(context: PartitionContext) -> None:
    """Each device segment's engine, built as `build` builds one (the backend's own options, the
    profiles `prepare` gives a dynamic input or cut), and loaded where it runs here."""
    from deploycc.backends.base import BackendError, BuildRequest
    from deploycc.partition.plan import DEVICE

    report, partition = context.report, context.plan
    assert report is not None and partition is not None and context.graph_model is not None
    folder, backend = context.staging / SEGMENTS, context.backend
    try:
        for segment in (s for s in partition.segments if s.placement == DEVICE):
            where = folder / f"{segment.index:02d}"
            where.mkdir()
            request = BuildRequest(model=folder / context.pipeline["segments"][segment.index]["file"],
                                   outdir=where, target=context.target, precision=context.precision,
                                   backend_options=backend.backend_options(context.options))
            if backend.stages.prepare is not None:
                backend.stages.prepare(request, _cut_ranges(context.options, context.graph_model.graph,
                                                            segment.inputs))
            artifact = backend.build(request)
            report.segments[segment.index]["artifact"] = {
                "kind": artifact.kind, "files": artifact.files, "settings": artifact.settings}
            if artifact.pending_on_device:
                context.pending = True
                continue
            context.runners[segment.index] = backend.load(artifact, where, request)
    except BackendError as error:
        report.notes.append(f"device segment build failed: {error}")
        context.pending, context.engines_failed = False, True


def _chain_on_engines_stage(context: PartitionContext) -> None:
    """The chain again, the device segments on their engines, at the precision's tolerances."""
    from deploycc.pipeline.build_stages import verification_precision
    from deploycc.runtime import Chain
    from deploycc.verify.verification import compare_all, reference_outputs

    report, legalized = context.report, context.legalized
    assert report is not None and legalized is not None
    drawn = context.inputs()
    expected, reference = reference_outputs(context.source, drawn.original_feeds)
    engines = Chain.load(context.staging / SEGMENTS, context.runners)
    report.chain_on_engines = compare_all(expected, engines.run(drawn.feeds), reference=reference,
                                          inputs=drawn.described,
                                          precision=verification_precision(legalized, context.precision),
                                          original=(context.source, drawn.original_feeds))


def _conclude_stage(context: PartitionContext) -> None:
    """pipeline.json with each device segment's artifact, and the status the chain earned."""
    from deploycc import io

    report = context.report
    assert report is not None and report.chain_on_ort is not None
    context.pipeline["segments"] = report.segments
    io.write_text_atomic(context.staging / SEGMENTS / "pipeline.json",
                         json.dumps(context.pipeline, indent=2) + "\n")
    if not report.chain_on_ort.passed:
        report.summary += f"; the chain on ONNX Runtime differs: {report.chain_on_ort.problem}"
    elif report.chain_on_engines is not None and not report.chain_on_engines.passed:
        report.summary += f"; the chain on the engines differs: {report.chain_on_engines.problem}"
    elif report.chain_on_engines is not None or not context.build_engines:
        report.status = VERIFIED
    elif context.pending:
        report.status = PENDING


def _engines_to_verify(context: PartitionContext) -> bool:
    """Every device segment's engine is here, and the chain passed on ONNX Runtime."""
    chain = context.report.chain_on_ort if context.report is not None else None
    built = context.build_engines and not context.pending and not context.engines_failed
    return built and chain is not None and chain.passed


PARTITION_STAGES: tuple[BuildStage[PartitionContext], ...] = (
    BuildStage("legalize", _legalize_stage),
    BuildStage("partition", _plan_stage),
    BuildStage("chain-on-ort", _chain_on_ort_stage),
    BuildStage("segment-engines", _segment_engines_stage, wanted=lambda c: c.build_engines),
    BuildStage("chain-on-engines", _chain_on_engines_stage, wanted=lambda c: _engines_to_verify(c)),
    BuildStage("conclude", _conclude_stage, label=lambda c: None),
)


def _cut_ranges(options: BuildOptions, graph: ir.Graph, inputs: list[str]) -> BuildOptions:
    """The options with a range for each cut tensor a segment reads whose dims are the graph
    inputs' own symbolic ones (a batch on any axis): each dim takes its input's range, so an
    engine built for profiles (TensorRT) gets one for a cut as for a graph input."""
    ranges: dict[str, tuple[int, int, int]] = {}
    for value in graph.inputs:
        given = options.shape_ranges.get(value.name or "")
        for axis, dim in enumerate(value.shape or []):
            if isinstance(dim, int) or dim.value is None:
                continue
            if given is not None:
                ranges.setdefault(dim.value, (given[0][axis], given[1][axis], given[2][axis]))
            elif axis == 0 and options.batch_range is not None:
                ranges.setdefault(dim.value, options.batch_range)
    made = {v.name: v for node in graph for v in node.outputs}
    cut_ranges = dict(options.shape_ranges)
    for name in inputs:
        cut = made.get(name)
        if cut is None or cut.shape is None or cut.shape.is_static():
            continue
        dims = list(cut.shape)
        if all(isinstance(d, int) or d.value in ranges for d in dims):
            per = [(d, d, d) if isinstance(d, int) else ranges[str(d.value)] for d in dims]
            cut_ranges[name] = ([p[0] for p in per], [p[1] for p in per], [p[2] for p in per])
    return replace(options, shape_ranges=cut_ranges) if cut_ranges != options.shape_ranges else options


def _write(staging: Path, report: PartitionReport) -> None:
    from deploycc import io
    from deploycc.report.markdown import partition_markdown

    io.write_text_atomic(staging / "report.json", report.to_json() + "\n")
    io.write_text_atomic(staging / "report.md", partition_markdown(report))
