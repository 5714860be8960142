"""The public Python API. The CLI is a thin shell over these functions.

Heavy modules (onnx, onnx-ir, and above all onnxruntime, openvino, tensorrt) are imported
inside the functions, so `import deploycc` stays cheap and backend-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import OptionError
from deploycc.records.targets import TargetListing, TargetSummary

if TYPE_CHECKING:
    from collections.abc import Callable

    from deploycc.analysis.check import CheckReport
    from deploycc.analysis.inspect import InspectReport
    from deploycc.audit.probe import ProbeReport
    from deploycc.bench.run import BenchOptions, BenchReport
    from deploycc.options import BuildOptions, LegalizeOptions
    from deploycc.records.audit import AuditOptions, AuditReport
    from deploycc.records.build import BuildReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.records.partition import PartitionReport
    from deploycc.targets.schema import Target


def summarize(target: Target) -> TargetSummary:
    return TargetSummary(
        name=target.name,
        description=target.description,
        aliases=list(target.aliases),
        backend=target.backend.kind,
        backend_version=target.backend.version,
        device=target.device.kind,
        opset_min=target.opset.min,
        opset_max=target.opset.max,
        opset_preferred=target.opset.preferred,
        op_table=target.ops.name,
        supported_ops=target.ops.count_supported(),
        jetpack=target.jetpack.release if target.jetpack else None,
        jetpack_available=list(target.jetpack.available) if target.jetpack else [],
        dla_cores=target.dla.cores if target.dla else 0,
        source_file=target.source_file,
    )


def get_target(spec: str = "ort-cpu", *, jetpack: str | None = None) -> Target:
    """A target by name, alias or TOML path (optionally at another JetPack release)."""
    from deploycc.targets import registry

    return registry.resolve(spec, jetpack)


def list_targets() -> TargetListing:
    from deploycc.targets import registry

    return TargetListing([summarize(t) for t in registry.list_targets()])


def inspect(model: str | Path) -> InspectReport:
    """IR version, opsets, I/O, op histogram, parameters, external data and redundancy."""
    from deploycc.analysis.inspect import inspect_model

    return inspect_model(model)


def check(
    model: str | Path,
    targets: Sequence[str | Target] = ("ort-cpu",),
    *,
    jetpack: str | None = None,
    dla: bool = False,
    explain: bool = False,
    capabilities: Sequence[str | Path] = (),
) -> CheckReport:
    """Judge every node of `model` against each target; list every illegal node and why.

    `capabilities`: tables written by `deploycc probe -o FILE`, laid over the declared ones.
    """
    from deploycc.analysis.check import check_model

    if not targets:
        raise OptionError("no target given", hint="pass at least one --target")
    resolved = [t if not isinstance(t, str) else get_target(t, jetpack=jetpack) for t in targets]
    return check_model(model, resolved, dla=dla, explain=explain,
                       capabilities=_load_capabilities(capabilities))


def _load_capabilities(paths: Sequence[str | Path]) -> dict[str, dict[str, str]]:
    import json

    tables: dict[str, dict[str, str]] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            tables[str(data["target"])] = {str(k): str(v) for k, v in data["rows"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise OptionError(f"{path}: not a capability table written by `deploycc probe` "
                              f"({error})") from None
    return tables


def probe(target: str, *, limit: int | None = None, names: list[str] | None = None, jobs: int = 1,
          progress: Callable[[int, int], None] | None = None,
          finished: Callable[[str, list[Any], int, int], None] | None = None) -> ProbeReport:
    """Run the ONNX conformance cases on `target`'s backend, as exported and legalized.
    `finished(op, its case results, cases done, total)` as each op's cases are all done."""
    from deploycc.audit.probe import probe as run

    return run(target, limit=limit, names=names, jobs=jobs, progress=progress, finished=finished)


def legalize(
    model: str | Path,
    target: str | Target = "ort-cpu",
    output: str | Path | None = None,
    options: LegalizeOptions | None = None,
    *,
    jetpack: str | None = None,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> LegalizeReport:
    """Rewrite `model` into one `target` accepts, prove every rewrite, verify, write atomically.

    Returns the report; `report.success` says whether the output was written (see `summary`).
    An existing `output` is refused unless `force`, as `build` refuses an existing directory.
    """
    from deploycc.pipeline.legalize import legalize as run

    if output is not None:
        from deploycc.io import refuse_overwrite

        source = Path(model)
        refuse_overwrite(Path(output), (source, source.with_name(source.name + ".data")))
        if Path(output).exists() and not force:
            raise OptionError(f"{output}: already exists", hint="pass --force to replace it")
    resolved = target if not isinstance(target, str) else get_target(target, jetpack=jetpack)
    return run(model, resolved, options, output=output, progress=progress)


def build(
    model: str | Path,
    target: str | Target | None = "ort-cpu",
    outdir: str | Path | None = None,
    options: BuildOptions | None = None,
    *,
    jetpack: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuildReport:
    """Legalize, build the target's engine, verify it, and write `outdir` atomically.

    With `options.engine_only`, `model` is a device bundle (`OUTDIR/bundle`) and only the
    engine is built from it (on the device; `outdir` defaults to the bundle's sibling `engine`).
    """
    from deploycc.options import BuildOptions as Options
    from deploycc.pipeline.build import build as run
    from deploycc.pipeline.engine_only import build_from_bundle

    options = options or Options()
    if options.engine_only:
        return build_from_bundle(Path(model), None if outdir is None else Path(outdir), options,
                                 target=target if target is None or isinstance(target, str) else target.name,
                                 jetpack=jetpack, progress=progress)
    chosen = "ort-cpu" if target is None else target
    resolved = get_target(chosen, jetpack=jetpack) if isinstance(chosen, str) else chosen
    return run(model, resolved, outdir or default_outdir(model, resolved), options, progress=progress)


def default_outdir(model: str | Path, target: Target) -> Path:
    """Where `build` writes without -o: `<model stem>.<target>/` in the current directory."""
    return Path(f"{Path(model).stem}.{target.name}")


def build_partitioned(
    model: str | Path,
    target: str | Target,
    outdir: str | Path | None,
    options: BuildOptions | None = None,
    *,
    jetpack: str | None = None,
    min_segment_nodes: int = 1,
    flops_per_byte: float | None = None,
    build_engines: bool = True,
) -> PartitionReport:
    """Build with host segments: what the target runs (after every rewrite) as device segments
    built by its backend, the rest on ONNX Runtime CPU; the chain verified against the original.
    Without `build_engines` (`legalize --partition`) only the segments, verified on ORT CPU."""
    from deploycc.pipeline.partition import build_partitioned as run

    resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
    return run(model, resolved, outdir or default_outdir(model, resolved), options,
               min_segment_nodes=min_segment_nodes,
               flops_per_byte=flops_per_byte, build_engines=build_engines)


def bench(
    subject: str | Path,
    target: str | Target | None = None,
    options: BenchOptions | None = None,
    *,
    jetpack: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> BenchReport:
    """Time a build directory's engine, or a model as-is on `target`'s backend (default ort-cpu)."""
    from deploycc.bench.run import bench as run

    resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
    return run(subject, resolved, options, progress=progress)


def audit(
    paths: Sequence[str | Path],
    targets: Sequence[str],
    outdir: str | Path,
    options: AuditOptions | None = None,
    *,
    jetpack: str | None = None,
    progress: Callable[[Any, int], None] | None = None,
    finished: Callable[[Any, int, int], None] | None = None,
) -> AuditReport:
    """Every (model, target) cell through the requested stages, isolated; reports in `outdir`.
    `progress(counts, total)` as cells finish; `finished(cell, done, total)` with each cell run."""
    from deploycc.audit.run import audit as run

    return run(paths, targets, outdir, options, jetpack=jetpack, progress=progress, finished=finished)
