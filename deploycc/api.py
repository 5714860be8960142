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
from deploycc.taxonomy import Precision

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


def check(model: Any, *args: Any, **kwargs: Any) -> CheckReport:
    """Judge every node of a model against each target; list every illegal node and why.

        check("model.onnx", ["jetson-xavier"])                       an ONNX file
        check(module, example_inputs, targets=["jetson-xavier"])     a torch model (or its file)
    """
    if _is_torch(model):
        return check_torch(model, *_torch_args(model, args, kwargs), **kwargs)
    return check_onnx(model, *args, **kwargs)


def check_torch(model: Any, example_inputs: Any = None, targets: Sequence[str | Target] = ("ort-cpu",), *,
                dynamic: Sequence[str] = (), exporters: Sequence[str] | None = None,
                jetpack: str | None = None, dla: bool = False, explain: bool = False) -> CheckReport:
    """`check` of a torch model: exported for each target as `build` would (its exporters, its
    opset ceiling) and the export checked; the notes say which exporter wrote what."""
    import tempfile

    from deploycc.frontend.build import export_for_target

    source = torch_source(model, example_inputs, dynamic=dynamic)
    source.exporters = _exporters(exporters) or source.exporters
    if not targets:
        raise OptionError("no target given", hint="pass at least one --target")
    merged: CheckReport | None = None
    with tempfile.TemporaryDirectory(prefix="deploycc-export-") as folder:
        for index, target in enumerate(targets):
            resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
            exported, path = export_for_target(source, resolved, Path(folder) / str(index))
            report = check_onnx(path, [resolved], dla=dla, explain=explain)
            written = exported.attempts[-1].opset_written
            report.notes.insert(0, f"{resolved.name}: {exported.line()}, opset {written}")
            if merged is None:
                merged = report
            else:
                merged.targets += report.targets
                merged.notes += report.notes
    assert merged is not None
    merged.path = source.label
    return merged


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
) -> CheckReport:
    """Judge every node of `model` against each target; list every illegal node and why.

    `capabilities`: tables written by `deploycc probe -o FILE`, laid over the declared ones.
    `precision` fp16 or bf16: also find what half precision breaks (on `inputs`, an .npz, or
    drawn as verification draws them) and the layers a build keeps in fp32, without building;
    "target" (the CLI's default): that analysis where a target builds in fp16 (or bf16) by default,
    as `build` does; None (the API's default, a read of the graph only) or fp32: none.
    """
    from deploycc.analysis.check import check_model

    if not targets:
        raise OptionError("no target given", hint="pass at least one --target")
    resolved = [t if not isinstance(t, str) else get_target(t, jetpack=jetpack) for t in targets]
    report = check_model(model, resolved, dla=dla, explain=explain,
                         capabilities=_load_capabilities(capabilities))
    if precision == "target":
        defaults = [Precision(t.precision.default) for t in resolved]
        precision = next((p for p in (Precision.FP16, Precision.BF16) if p in defaults), None)
        if precision is not None and _model_bytes(model) > CHECK_ANALYSIS_BYTES:
            # check stays a quick read of the graph by default: a large model runs when asked
            report.notes.append(f"no {precision.value} analysis by default for a model over "
                                f"{CHECK_ANALYSIS_BYTES >> 30} GiB (it runs the model): "
                                f"`check --precision {precision.value}` runs it; `build` always does")
            precision = None
    if precision in (Precision.FP16, Precision.BF16):
        from deploycc.errors import DeployccError
        from deploycc.verify.runner import RunError

        try:
            report.half = half_analysis(model, Precision(precision), inputs)
        except (RunError, DeployccError) as error:  # the legality verdicts stand without it
            report.notes.append(f"no {Precision(precision).value} analysis: {error}")
        except Exception as error:  # a model the checker passes and the tools choke on: advice lost only
            report.notes.append(f"no {Precision(precision).value} analysis: {type(error).__name__}: "
                                f"{str(error).strip()[:200]}")
    return report


CHECK_ANALYSIS_BYTES = 1 << 30  # check's default fp16 analysis runs on models up to this size


def _model_bytes(model: str | Path) -> int:
    from deploycc import io

    loaded = io.load(model, check=False)
    return loaded.file_size + sum(f.size_bytes for f in loaded.external_files)


def half_analysis(model: str | Path, precision: Precision, inputs: str | Path | None = None) -> Any:
    """What fp16 (or bf16) breaks in an ONNX model and the fewest layers to keep in fp32, on
    `inputs` (an .npz) or on inputs drawn as verification draws them (deploycc.fp16)."""
    from deploycc.fp16 import analyze_half
    from deploycc.options import LegalizeOptions
    from deploycc.verify.verification import signature_feeds

    options = LegalizeOptions(inputs=Path(inputs) if inputs is not None else None)
    feeds, _, described = signature_feeds(Path(model), options, {}, None, Path(model))
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


def legalize(model: Any, *args: Any, **kwargs: Any) -> LegalizeReport:
    """Rewrite a model into one the target accepts, prove every rewrite, verify, write atomically.

        legalize("model.onnx", "jetson-nano", "out.onnx", options)       an ONNX file
        legalize(module, example_inputs, target="jetson-nano", output=...)   a torch model (or its file)
    """
    if _is_torch(model):
        return legalize_torch(model, *_torch_args(model, args, kwargs), **kwargs)
    return legalize_onnx(model, *args, **kwargs)


def legalize_torch(
    model: Any,
    example_inputs: Any = None,
    target: str | Target = "ort-cpu",
    output: str | Path | None = None,
    options: LegalizeOptions | None = None,
    *,
    dynamic: Sequence[str] = (),
    exporters: Sequence[str] | None = None,
    jetpack: str | None = None,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> LegalizeReport:
    """`legalize` of a torch model: exported for the target and proven (the first exporter in
    its order that does both), then legalized as an ONNX file is."""
    import tempfile

    from deploycc.frontend.build import export_for_target

    source = torch_source(model, example_inputs, dynamic=dynamic)
    source.exporters = _exporters(exporters) or source.exporters
    resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
    with tempfile.TemporaryDirectory(prefix="deploycc-export-") as folder:
        exported, path = export_for_target(source, resolved, Path(folder))
        report = legalize_onnx(path, resolved, output, options, progress=progress, force=force)
    report.source, report.export = source.label, exported
    return report


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
    from deploycc.pipeline.legalize import legalize as run

    if output is not None:
        from deploycc.io import refuse_overwrite

        source = Path(model)
        refuse_overwrite(Path(output), (source, source.with_name(source.name + ".data")))
        if Path(output).exists() and not force:
            raise OptionError(f"{output}: already exists", hint="pass --force to replace it")
    resolved = target if not isinstance(target, str) else get_target(target, jetpack=jetpack)
    return run(model, resolved, options, output=output, progress=progress)


def build(model: Any, *args: Any, **kwargs: Any) -> BuildReport:
    """Legalize, build the target's engine, verify it, and write `outdir` atomically.

        build("model.onnx", "jetson-xavier", "out/", options)           an ONNX file
        build(module, example_inputs, target="jetson-xavier")          a torch.nn.Module
        build("model.pt2" | "model.pt" | "pkg.mod:factory", "jetson-xavier")   a torch model's file

    A torch model is exported by the PyTorch front end (see `build_torch`); anything else is
    `build_onnx`'s.
    """
    if _is_torch(model):
        return build_torch(model, *_torch_args(model, args, kwargs), **kwargs)
    return build_onnx(model, *args, **kwargs)


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


def build_torch(
    model: Any,
    example_inputs: Any = None,
    target: str | Target = "ort-cpu",
    outdir: str | Path | None = None,
    options: BuildOptions | None = None,
    *,
    dynamic: Sequence[str] = (),
    exporters: Sequence[str] | None = None,
    jetpack: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuildReport:
    """`build` of a torch model: an nn.Module with its example inputs (a tensor or a tuple of them),
    a TorchSource, or the path of a .pt2 / .pt archive or a `module.path:factory`.

    The target's exporters are tried in its order (`exporters` overrides it), at its opset ceiling,
    each export proven against torch; the kept one is built as `build_onnx` builds, and proven
    against torch once more. `dynamic`: more axes to keep dynamic, as `name:axis[:min:opt:max]`.
    """
    from deploycc.frontend.build import build_from_torch

    source = torch_source(model, example_inputs, dynamic=dynamic)
    source.exporters = _exporters(exporters) or source.exporters
    resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
    return build_from_torch(source, resolved, outdir or default_outdir(source.label, resolved), options,
                            progress=progress)


def torch_source(model: Any, example_inputs: Any = None, *, dynamic: Sequence[str] = (),
                 input_specs: Sequence[str] = ()) -> Any:
    """A loaded torch model (frontend.sources.TorchSource) from whatever the API was given.
    `example_inputs` may also be the path of an .npz keyed by input name."""
    from deploycc.frontend.sources import TorchSource, load_source, with_inputs

    if isinstance(model, TorchSource):
        return model
    npz = Path(example_inputs) if isinstance(example_inputs, (str, Path)) else None
    if isinstance(model, (str, Path)):
        return load_source(model, example_inputs=npz, input_specs=tuple(input_specs),
                           dynamic_specs=tuple(dynamic))
    return with_inputs(model, None if npz is not None else example_inputs, example_inputs=npz,
                       input_specs=tuple(input_specs), dynamic_specs=tuple(dynamic))


def _exporters(names: Sequence[str] | None) -> tuple[str, ...] | None:
    from deploycc.frontend.exporters import EXPORTERS

    if not names:
        return None
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        raise OptionError(f"unknown exporter {unknown[0]!r}", hint=f"one of {', '.join(EXPORTERS)}")
    return tuple(names)


def _torch_args(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The positional arguments for a `*_torch` function: a module's come after its example inputs;
    a file's (.pt2, .pt, module:factory) are the ONNX file's (the target first), so its example
    inputs, if any, come by keyword."""
    if isinstance(model, (str, Path)) or type(model).__name__ == "TorchSource":
        return (kwargs.pop("example_inputs", None), *args)
    return args


def _is_torch(model: Any) -> bool:
    """A torch model: a module object (torch already imported by the caller who made it), a
    TorchSource, or a .pt2 / .pt / `module:factory` spec."""
    import sys

    from deploycc.frontend import source_kind

    if isinstance(model, (str, Path)):
        return source_kind(model) is not None
    if type(model).__name__ == "TorchSource":
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def default_outdir(model: str | Path, target: Target) -> Path:
    """Where `build` writes without -o: `<model stem>.<target>/` in the current directory (for
    `package.module:factory`, the factory's name)."""
    factory = ":" in str(model) and not Path(model).exists()
    stem = Path(str(model).rsplit(":", 1)[-1] if factory else model).stem
    return Path(f"{stem}.{target.name}")


def build_partitioned(
    model: Any,
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
    import tempfile

    from deploycc.pipeline.partition import build_partitioned as run

    resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
    if not _is_torch(model):
        return run(model, resolved, outdir or default_outdir(model, resolved), options,
                   min_segment_nodes=min_segment_nodes, flops_per_byte=flops_per_byte,
                   build_engines=build_engines)
    from deploycc.frontend.build import export_for_target

    source = torch_source(model)  # a torch model: exported and proven first, then cut as an ONNX file is
    with tempfile.TemporaryDirectory(prefix="deploycc-export-") as folder:
        exported, path = export_for_target(source, resolved, Path(folder))
        report = run(path, resolved, outdir or default_outdir(source.label, resolved), options,
                     min_segment_nodes=min_segment_nodes, flops_per_byte=flops_per_byte,
                     build_engines=build_engines)
    report.notes.insert(0, exported.line())
    return report


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
    paths: Sequence[Any],
    targets: Sequence[str],
    outdir: str | Path,
    options: AuditOptions | None = None,
    *,
    jetpack: str | None = None,
    progress: Callable[[Any, int], None] | None = None,
    finished: Callable[[Any, int, int], None] | None = None,
) -> AuditReport:
    """Every (model, target) cell through the requested stages, isolated; reports in `outdir`.
    A model is an .onnx file, a folder or list file of them, a PyTorch model as `build` takes it
    (.pt2, .pt, `module:factory`), or in the API a module with its example inputs,
    `(module, example_inputs)` (saved under OUTDIR/sources/ for the cells' processes: a .pt2, or a
    TorchScript trace where torch.export does not take it).
    `progress(counts, total)` as cells finish; `finished(cell, done, total)` with each cell run."""
    from deploycc.audit.run import audit as run

    return run(_audit_paths(paths, Path(outdir)), targets, outdir, options, jetpack=jetpack,
               progress=progress, finished=finished)


def _audit_paths(entries: Sequence[Any], outdir: Path) -> list[str | Path]:
    """The audit's entries as paths: an in-memory module, alone (a TorchSource) or with its example
    inputs, saved as an archive named by its class (and its place in the list where two share one)."""
    from deploycc.frontend.sources import save_archive

    paths: list[str | Path] = []
    stems: set[str] = set()
    for index, entry in enumerate(entries):
        if isinstance(entry, (str, Path)):
            paths.append(entry)
            continue
        module, inputs = entry if isinstance(entry, tuple) and len(entry) == 2 else (entry, None)
        if not _is_torch(module):
            raise OptionError(f"audit entry {index}: a {type(entry).__name__}, not a model",
                              hint="give paths, PyTorch module specs, or (module, example_inputs)")
        source = torch_source(module, inputs)
        stem = type(source.module).__name__
        stem = f"{stem}-{index}" if stem in stems else stem
        stems.add(stem)
        paths.append(save_archive(source, outdir / "sources", stem))
    return paths
