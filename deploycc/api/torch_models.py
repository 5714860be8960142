"""The API for torch models (an nn.Module with its example inputs, a .pt2 / .pt archive, a
`module:factory`): exported for each target by the front end, then as an ONNX file is; and the
commands that take either kind (build --partition, audit)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.api.onnx_models import check_onnx, default_outdir, get_target, legalize_onnx
from deploycc.errors import OptionError

if TYPE_CHECKING:
    from collections.abc import Callable

    from deploycc.analysis.check import CheckReport
    from deploycc.options import BuildOptions, LegalizeOptions
    from deploycc.records.audit import AuditOptions, AuditReport
    from deploycc.records.build import BuildReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.records.partition import PartitionReport
    from deploycc.targets.schema import Target
    from deploycc.taxonomy import Precision


def check_torch(model: Any, example_inputs: Any = None, targets: Sequence[str | Target] = ("ort-cpu",), *,
                dynamic: Sequence[str] = (), exporters: Sequence[str] | None = None,
                accept_trace_warnings: bool = False,
                jetpack: str | None = None, dla: bool = False, explain: bool = False,
                precision: Precision | str | None = None, strict: bool = False) -> CheckReport:
    """`check` of a torch model: exported for each target as `build` would (its exporters, its
    opset ceiling) and the export checked; the notes say which exporter wrote what. `precision`
    as for an ONNX file ("target": the fp16 analysis where the target builds in half), run on the
    module's example inputs."""
    import tempfile

    from deploycc.frontend.build import export_for_target
    from deploycc.frontend.causal_lm import is_causal_lm

    source = torch_source(model, example_inputs, dynamic=dynamic)
    source.exporters = _exporters(exporters) or source.exporters
    source.accept_trace_warnings = accept_trace_warnings or source.accept_trace_warnings
    if not targets:
        raise OptionError("no target given", hint="pass at least one --target")
    merged: CheckReport | None = None
    with tempfile.TemporaryDirectory(prefix="deploycc-export-") as folder:
        for index, target in enumerate(targets):
            resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
            exported, path = export_for_target(source, resolved, Path(folder) / str(index))
            # a causal LM's export reads its cache beside the prompt: its inputs are drawn as for
            # the ONNX file (the dims' roles), not taken from the example
            feeds = _example_feeds(source, resolved, path) if precision and not is_causal_lm(source.module) \
                else None
            report = check_onnx(path, [resolved], dla=dla, explain=explain, strict=strict,
                                precision=precision, inputs=feeds)
            written = exported.attempts[-1].opset_written
            report.notes.insert(0, f"{resolved.name}: {exported.line()}, opset {written}")
            if merged is None:
                merged = report
            else:
                merged.targets += report.targets
                merged.notes += report.notes
                merged.skipped_steps += report.skipped_steps
                merged.half = merged.half or report.half
    assert merged is not None
    merged.path = source.label
    return merged


def legalize_torch(
    model: Any,
    example_inputs: Any = None,
    target: str | Target = "ort-cpu",
    output: str | Path | None = None,
    options: LegalizeOptions | None = None,
    *,
    dynamic: Sequence[str] = (),
    exporters: Sequence[str] | None = None,
    accept_trace_warnings: bool = False,
    jetpack: str | None = None,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> LegalizeReport:
    """`legalize` of a torch model: exported for the target and proven (the first exporter in
    its order that does both), then legalized as an ONNX file is."""
    import tempfile

    from deploycc import io
    from deploycc.frontend.build import export_for_target

    source = torch_source(model, example_inputs, dynamic=dynamic)
    source.exporters = _exporters(exporters) or source.exporters
    source.accept_trace_warnings = accept_trace_warnings or source.accept_trace_warnings
    resolved = get_target(target, jetpack=jetpack) if isinstance(target, str) else target
    # the torch files are inputs too; the output is claimed before the export, not after it
    with io.claim([Path(output) if output is not None else None], inputs=_given_files(model, example_inputs),
                  force=force), tempfile.TemporaryDirectory(prefix="deploycc-export-") as folder:
        exported, path = export_for_target(source, resolved, Path(folder))
        report = legalize_onnx(path, resolved, output, options, progress=progress, force=force)
    report.source, report.export = source.label, exported
    return report


def _given_files(*given: Any) -> list[Path]:
    """The files among a torch model's arguments (a .pt2, an .npz of example inputs)."""
    return [Path(item) for item in given if isinstance(item, (str, Path)) and Path(item).is_file()]


def build_torch(
    model: Any,
    example_inputs: Any = None,
    target: str | Target = "ort-cpu",
    outdir: str | Path | None = None,
    options: BuildOptions | None = None,
    *,
    dynamic: Sequence[str] = (),
    exporters: Sequence[str] | None = None,
    accept_trace_warnings: bool = False,
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
    source.accept_trace_warnings = accept_trace_warnings or source.accept_trace_warnings
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


def _example_feeds(source: Any, target: Target, exported: Path) -> Path:
    """The module's example inputs, as exported for `target` (at its batch), as an .npz keyed by
    the export's input names, beside it."""
    import numpy as np

    from deploycc import io
    from deploycc.frontend.build import at_target_batch
    from deploycc.frontend.proof import feeds_for

    graph = io.load(exported, check=False).model.graph
    path = exported.with_name("example-inputs.npz")
    at_batch, _ = at_target_batch(source, target)
    np.savez(path, **feeds_for(list(graph.inputs), at_batch, at_batch.inputs))
    return path


def _exporters(names: Sequence[str] | None) -> tuple[str, ...] | None:
    from deploycc.frontend.exporters import EXPORTERS

    if not names:
        return None
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        raise OptionError(f"unknown exporter {unknown[0]!r}", hint=f"one of {', '.join(EXPORTERS)}")
    return tuple(names)


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
