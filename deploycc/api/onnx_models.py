"""The API for ONNX files, and what every kind of model shares: targets, inspect, check, legalize,
build and bench of an ONNX file, and where a build writes by default."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import ModelInputError, OptionError
from deploycc.records.targets import TargetListing, TargetSummary
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from collections.abc import Callable

    from deploycc.analysis.check import CheckReport
    from deploycc.analysis.inspect import InspectReport
    from deploycc.audit.probe import ProbeReport
    from deploycc.bench.run import BenchOptions, BenchReport
    from deploycc.options import BuildOptions, LegalizeOptions
    from deploycc.records.build import BuildReport
    from deploycc.records.legalize import LegalizeReport
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
    """IR version, opsets, I/O, op histogram, parameters, external data and redundancy of an ONNX
    file; a torch model is refused with what reads it (check exports it as build does)."""
    from deploycc.analysis.inspect import inspect_model
    from deploycc.frontend import source_kind

    kind = source_kind(model)
    if kind is not None and (kind == "factory" or Path(model).exists()):
        what = {"pt2": "a torch.export archive", "torchscript": "a TorchScript archive"}.get(kind,
                                                                                           "a torch model")
        raise ModelInputError(f"{model}: {what}; inspect reads ONNX files",
                              hint=f"deploycc.check({str(model)!r}, [target]) exports it as build does and "
                                   "checks the export",
                              cli_hint=f"`deploycc check {model} -t TARGET` exports it as build does and "
                                       "checks the export")
    return inspect_model(model)


def check_onnx(
    model: str | Path,
    targets: Sequence[str | Target] = ("ort-cpu",),
    *,
    jetpack: str | None = None,
    dla: bool = False,
    explain: bool = False,
    capabilities: Sequence[str | Path] = (),
    precision: Precision | str | None = None,
    inputs: str | Path | None = None,
    strict: bool = False,
) -> CheckReport:
    """Judge every node of `model` against each target; list every illegal node and why.

    `capabilities`: tables written by `deploycc probe -o FILE`, laid over the declared ones.
    `precision` fp16 or bf16: also find what half precision breaks (on `inputs`, an .npz, or
    drawn as verification draws them) and the layers a build keeps in fp32, without building;
    "target" (the CLI's default): that analysis where a target builds in fp16 (or bf16) by default,
    as `build` does; None (the API's default, a read of the graph only) or fp32: none. An analysis
    asked for that does not run is in `report.skipped_steps`; `strict`: then `report.exit_code` is 1.
    """
    from deploycc.analysis.check import check_model
    from deploycc.results import SkippedStep
    from deploycc.taxonomy import SafetyStep

    if not targets:
        raise OptionError("no target given", hint="pass at least one --target")
    resolved = [t if not isinstance(t, str) else get_target(t, jetpack=jetpack) for t in targets]
    report = check_model(model, resolved, dla=dla, explain=explain,
                         capabilities=_load_capabilities(capabilities))
    report.strict = strict
    if precision == "target":
        defaults = [Precision(t.precision.default) for t in resolved]
        precision = next((p for p in (Precision.FP16, Precision.BF16) if p in defaults), None)
        if precision is not None and _model_bytes(model) > CHECK_ANALYSIS_BYTES:
            # check stays a quick read of the graph by default: a large model runs when asked
            report.skipped_steps.append(SkippedStep(
                SafetyStep.half_analysis(precision),
                f"not by default for a model over {CHECK_ANALYSIS_BYTES >> 30} GiB (it runs the model): "
                f"`check --precision {precision.value}` runs it; `build` always does"))
            precision = None
    if precision in (Precision.FP16, Precision.BF16):
        from deploycc.errors import DeployccError
        from deploycc.verify.runner import RunError

        why = ""
        try:
            report.half = half_analysis(model, Precision(precision), inputs)
        except (RunError, DeployccError) as error:  # the legality verdicts stand without it
            why = str(error)
        except Exception as error:  # a model the checker passes and the tools choke on: advice lost only
            why = f"{type(error).__name__}: {str(error).strip()[:200]}"
        if why:
            report.skipped_steps.append(SkippedStep(SafetyStep.half_analysis(Precision(precision)), why))
    return report


CHECK_ANALYSIS_BYTES = 1 << 30  # check's default fp16 analysis runs on models up to this size

def _model_bytes(model: str | Path) -> int:
    from deploycc import io

    loaded = io.load(model, check=False)
    return loaded.file_size + sum(f.size_bytes for f in loaded.external_files)


def half_analysis(model: str | Path, precision: Precision, inputs: str | Path | None = None) -> Any:
    """What fp16 (or bf16) breaks in an ONNX model and the fewest layers to keep in fp32, on
    `inputs` (an .npz) or on inputs drawn as verification draws them (deploycc.fp16)."""
    from deploycc import io
    from deploycc.fp16 import analyze_half
    from deploycc.options import LegalizeOptions
    from deploycc.verify.verification import feeds_for

    options = LegalizeOptions(inputs=Path(inputs) if inputs is not None else None)
    # the model as given: no legalization moved its inputs' layouts
    feeds, _, described = feeds_for(io.peek(model).model.graph, options, {}, source=Path(model))
    return analyze_half(Path(model), feeds, precision, inputs=described)


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


def legalize_onnx(
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
    from deploycc import io
    from deploycc.pipeline.legalize import legalize as run

    inputs = [Path(model), *([options.inputs] if options is not None and options.inputs else [])]
    with io.claim([Path(output) if output is not None else None], inputs=inputs, force=force):
        resolved = target if not isinstance(target, str) else get_target(target, jetpack=jetpack)
        return run(model, resolved, options, output=output, progress=progress)


def build_onnx(
    model: str | Path,
    target: str | Target | None = "ort-cpu",
    outdir: str | Path | None = None,
    options: BuildOptions | None = None,
    *,
    jetpack: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuildReport:
    """`build` of an ONNX file.

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
    """Where `build` writes without -o: `<model stem>.<target>/` in the current directory (for
    `package.module:factory`, the factory's name)."""
    factory = ":" in str(model) and not Path(model).exists()
    stem = Path(str(model).rsplit(":", 1)[-1] if factory else model).stem
    return Path(f"{stem}.{target.name}")


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
