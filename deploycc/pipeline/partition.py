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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import OptionError
from deploycc.options import BuildOptions
from deploycc.pipeline.build import FAILED, LEGALIZED, PENDING, VERIFIED
from deploycc.records.partition import PartitionReport
from deploycc.taxonomy import Legality, LegalizeMode, Precision

if TYPE_CHECKING:
    import onnx_ir as ir

    from deploycc.partition.plan import PartitionPlan
    from deploycc.targets.schema import Target

SEGMENTS = "segments"


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


def build_partitioned(model: str | Path, target: Target, outdir: str | Path,
                      options: BuildOptions | None = None, *, min_segment_nodes: int = 1,
                      flops_per_byte: float | None = None, build_engines: bool = True) -> PartitionReport:
    """`min_segment_nodes` and `flops_per_byte` (None: the plan's default) are the cost model's
    bounds for a device segment worth its launch; without `build_engines` the segments are written
    and verified on ONNX Runtime CPU only (`legalize --partition`)."""
    from deploycc import io
    from deploycc.backends.base import BackendError, BuildRequest
    from deploycc.backends.registry import get_backend
    from deploycc.graph.shapes import load_inferred
    from deploycc.partition.plan import DEVICE, plan
    from deploycc.partition.segments import observe_cut_shapes, write_segments
    from deploycc.pipeline.build import verification_precision
    from deploycc.pipeline.legalize import legalize
    from deploycc.pipeline.shape_policy import plan_shapes
    from deploycc.runtime import Chain
    from deploycc.verify.verification import compare_all, drawn_content, reference_outputs, signature_feeds

    options = options or BuildOptions()
    # the caller's options stay as they were
    options = replace(options, legalize=replace(options.legalize, mode=LegalizeMode.PARTIAL))
    source, outdir = Path(model), Path(outdir)
    precision = options.effective_precision(target)
    if min_segment_nodes < 1:
        raise OptionError("--min-segment-nodes must be at least 1")
    backend = get_backend(target.backend.kind)
    with io.StagedDirectory(outdir, force=options.force, protect=(source,)) as staged:
        staging = staged.staging
        _, options = plan_shapes(source, target, options)  # the target's shape policy, as `build` applies it
        legalized = legalize(source, target, options.legalize, output=staging / LEGALIZED)
        report = PartitionReport(model=str(source), target=target.name, outdir=str(outdir), status=FAILED,
                                 summary=legalized.summary, precision=precision, segments=[],
                                 host_nodes={}, cuts=[], device_flops_share=0.0, legalize=legalized,
                                 chain_on_ort=None, chain_on_engines=None)
        if legalized.success:
            graph_model = load_inferred(staging / LEGALIZED, check=False).model
            bounds = {"flops_per_byte": flops_per_byte} if flops_per_byte is not None else {}
            # TensorRT engines here are built for the shapes the axes pass fixed (profiles for
            # graph inputs only), so a cut tensor sized by the data keeps its reader on the host.
            partition = plan(graph_model.graph, node_judge(graph_model, target),
                             min_segment_nodes=min_segment_nodes,
                             static_cuts=backend.fixed_shape_engines, **bounds)
            feeds, original_feeds, described = signature_feeds(
                staging / LEGALIZED, options.legalize, legalized.fed_layouts, source=source,
                content=drawn_content(legalized.verification))
            observed = observe_cut_shapes(graph_model, partition, feeds)
            if observed:
                report.notes.append(f"cut tensor(s) without inferred shape given the rank they run with: "
                                    f"{', '.join(observed)}")
            folder = staging / SEGMENTS
            pipeline = write_segments(graph_model, partition, folder, source=source.name, target=target.name)
            report.segments, report.cuts = pipeline["segments"], pipeline["cuts"]
            report.host_nodes = partition.host_reasons
            report.device_flops_share = partition.device_flops_share
            report.flops, report.device_flops = partition.flops, partition.device_flops
            report.summary = _summary(partition, target, pipeline)
            if not any(s.placement == DEVICE for s in partition.segments):
                report.notes.append(f"nothing runs on {target.name}: every node is on the host")
            expected, reference = reference_outputs(source, original_feeds)
            tolerance = verification_precision(legalized, precision)
            chain = Chain.load(folder)
            try:
                report.chain_on_ort = compare_all(expected, chain.run(feeds), reference=reference,
                                                  inputs=described,
                                                  precision=verification_precision(legalized, Precision.FP32))
            except Exception as error:  # ORT refusing a segment is a cutting bug to report, not a crash
                report.notes.append(f"the chain did not run on ONNX Runtime: {str(error).splitlines()[0]}")
            finally:
                chain.close()
            if report.chain_on_ort is None:
                _write(staging, report)
                staged.commit()
                return report
            runners: dict[int, Any] = {}
            pending = False
            try:
                for segment in partition.segments:
                    if segment.placement != DEVICE or not build_engines:
                        continue
                    where = folder / f"{segment.index:02d}"
                    where.mkdir()
                    request = BuildRequest(model=folder / pipeline["segments"][segment.index]["file"],
                                           outdir=where, target=target, precision=precision)
                    # as `build` does (TensorRT: dynamic inputs' profiles); the backend's own options
                    # (--format, --dla-core, --workspace-mb) stay its defaults here, as they always have
                    backend.prepare(request, _cut_ranges(options, graph_model.graph, segment.inputs))
                    artifact = backend.build(request)
                    report.segments[segment.index]["artifact"] = {
                        "kind": artifact.kind, "files": artifact.files, "settings": artifact.settings}
                    if artifact.pending_on_device:
                        pending = True
                        continue
                    runners[segment.index] = backend.load(artifact, where, request)
                if report.chain_on_ort.passed and not pending and build_engines:
                    engines = Chain.load(folder, runners)
                    report.chain_on_engines = compare_all(expected, engines.run(feeds), reference=reference,
                                                          inputs=described, precision=tolerance,
                                                          original=(source, original_feeds))
            except BackendError as error:
                report.notes.append(f"device segment build failed: {error}")
                pending = False
            finally:
                for runner in runners.values():
                    runner.close()
            pipeline["segments"] = report.segments  # now with each device segment's artifact
            io.write_text_atomic(folder / "pipeline.json", json.dumps(pipeline, indent=2) + "\n")
            if not report.chain_on_ort.passed:
                report.summary += f"; the chain on ONNX Runtime differs: {report.chain_on_ort.problem}"
            elif report.chain_on_engines is not None and not report.chain_on_engines.passed:
                report.summary += f"; the chain on the engines differs: {report.chain_on_engines.problem}"
            elif report.chain_on_engines is not None or not build_engines:
                report.status = VERIFIED
            elif pending:
                report.status = PENDING
        _write(staging, report)
        staged.commit()
    return report


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
