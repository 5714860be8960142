"""The public Python API. The CLI is a thin shell over these functions.

check, legalize and build take any model: an ONNX file, or a torch model (an nn.Module with its
example inputs, a .pt2 / .pt archive, a `module:factory`), and hand it to the ONNX half
(onnx_models.py) or the torch half (torch_models.py).

Heavy modules (onnx, onnx-ir, and above all onnxruntime, openvino, tensorrt) are imported
inside the functions, so `import deploycc` stays cheap and backend-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.api.onnx_models import (
    CHECK_ANALYSIS_BYTES,
    bench,
    build_onnx,
    check_onnx,
    default_outdir,
    get_target,
    half_analysis,
    inspect,
    legalize_onnx,
    list_targets,
    probe,
    summarize,
)
from deploycc.api.torch_models import (
    _is_torch,
    audit,
    build_partitioned,
    build_torch,
    check_torch,
    legalize_torch,
    torch_source,
)
from deploycc.errors import OptionError
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from collections.abc import Callable

    from deploycc.analysis.check import CheckReport
    from deploycc.options import BuildOptions, LegalizeOptions
    from deploycc.records.build import BuildReport
    from deploycc.records.legalize import LegalizeReport
    from deploycc.targets.schema import Target

__all__ = ["CHECK_ANALYSIS_BYTES", "audit", "bench", "build", "build_onnx", "build_partitioned",
           "build_torch", "check", "check_onnx", "check_torch", "default_outdir", "get_target",
           "half_analysis", "inspect", "legalize", "legalize_onnx", "legalize_torch", "list_targets", "probe",
           "summarize", "torch_source"]


def check(
    model: Any,
    example_inputs: Any = None,
    targets: str | Target | Sequence[str | Target] | None = None,
    *,
    dynamic: Sequence[str] = (),
    exporters: Sequence[str] | None = None,
    accept_trace_warnings: bool = False,
    jetpack: str | None = None,
    dla: bool = False,
    explain: bool = False,
    capabilities: Sequence[str | Path] = (),
    precision: Precision | str | None = None,
    inputs: str | Path | None = None,
    strict: bool = False,
) -> CheckReport:
    """Judge every node of a model against each target; list every illegal node and why.

        check("model.onnx", ["jetson-xavier", "openvino-cpu"])          an ONNX file
        check(module, (example,), targets=["jetson-xavier"])            a torch.nn.Module
        check("model.pt2", ["jetson-xavier"])                           a torch model's file

    model: an ONNX file, a torch.nn.Module, or a torch model's file (.pt2, .pt,
    `package.module:factory`), exported for each target as `build` exports it, and the export checked.
    example_inputs: a module's example inputs (a tensor, a tuple of them, or an .npz). A model
    given as a file takes its targets in this place, as the command line does.
    targets: target names, aliases, .toml paths or Targets (default: ort-cpu).
    dynamic, exporters: a torch model's axes to keep dynamic (`name:axis[:min:opt:max]`) and its
    exporters in order (default: the target's order).
    accept_trace_warnings: keep a torch trace that fixed what the inputs' data decides (refused
    otherwise, as data-dependent-guard).
    jetpack: resolve Jetson targets at this JetPack release. dla: also judge for the DLA.
    explain: say why each rule in the catalog declines an illegal node.
    capabilities, precision, inputs (an ONNX file only): tables written by `deploycc probe`; an
    fp16/bf16 analysis of what half precision breaks ("target": where a target builds in half by
    default), on `inputs` (an .npz) or on drawn inputs.
    strict: a safety step skipped (the fp16 analysis) makes `report.exit_code` 1; it is in
    `report.skipped_steps` either way.
    """
    if not _in_memory(model) and (example_inputs is None or _names_targets(example_inputs)):
        if example_inputs is not None:  # check(path, targets): the command line's order
            if targets is not None:
                raise OptionError("targets given twice", hint="check(model, targets) or "
                                  "check(model, targets=...), not both")
            example_inputs, targets = None, example_inputs
    chosen = ["ort-cpu"] if targets is None else [targets] if isinstance(targets, str) or \
        not isinstance(targets, Sequence) else list(targets)
    if _is_torch(model):
        given = [name for name, value in (("capabilities", capabilities), ("inputs", inputs)) if value]
        if given:
            raise OptionError(f"{given[0]}= is for an ONNX model, and {model!r} is a torch model",
                              hint="check the exported file instead")
        return check_torch(model, example_inputs, chosen, dynamic=dynamic, exporters=exporters,
                           accept_trace_warnings=accept_trace_warnings, jetpack=jetpack, dla=dla,
                           explain=explain, precision=precision, strict=strict)
    _no_torch_arguments(model, example_inputs=example_inputs, dynamic=dynamic, exporters=exporters,
                        accept_trace_warnings=accept_trace_warnings)
    return check_onnx(model, chosen, jetpack=jetpack, dla=dla, explain=explain, capabilities=capabilities,
                      precision=precision, inputs=inputs, strict=strict)


def legalize(
    model: Any,
    example_inputs: Any = None,
    target: str | Target | None = None,
    output: str | Path | None = None,
    options: LegalizeOptions | None = None,
    *,
    dynamic: Sequence[str] = (),
    exporters: Sequence[str] | None = None,
    accept_trace_warnings: bool = False,
    jetpack: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> LegalizeReport:
    """Rewrite a model into one the target accepts, prove every rewrite, verify, write atomically.

        legalize("model.onnx", "jetson-nano", "out.onnx", options)            an ONNX file
        legalize(module, (example,), target="jetson-nano", output="out.onnx")  a torch.nn.Module
        legalize("model.pt2", "jetson-nano", "out.onnx")                      a torch model's file

    model: an ONNX file, a torch.nn.Module, or a torch model's file (.pt2, .pt,
    `package.module:factory`), exported for the target and proven first (the first exporter in its
    order that does both), then legalized as an ONNX file is.
    example_inputs: a module's example inputs (a tensor, a tuple of them, or an .npz). A model
    given as a file takes its target in this place, as the command line does.
    target: a target name, alias, .toml path or Target (default: ort-cpu).
    output: where to write the legalized model (None: nothing written, the report only); an
    existing file is refused unless `force`.
    dynamic, exporters: a torch model's axes to keep dynamic and its exporters in order.
    accept_trace_warnings: keep a torch trace that fixed what the inputs' data decides.
    Returns the report; `report.success` says whether the output was written.
    """
    from deploycc.options import LegalizeOptions as Options

    if not _in_memory(model) and (_names_targets(example_inputs, one=True) or
                                  (example_inputs is None and isinstance(output, Options))):
        example_inputs, target, output, options = _file_order(example_inputs, target, output, options,
                                                              Options)
    if _is_torch(model):
        return legalize_torch(model, example_inputs, target or "ort-cpu", output, options, dynamic=dynamic,
                              exporters=exporters, accept_trace_warnings=accept_trace_warnings,
                              jetpack=jetpack, progress=progress, force=force)
    _no_torch_arguments(model, example_inputs=example_inputs, dynamic=dynamic, exporters=exporters,
                        accept_trace_warnings=accept_trace_warnings)
    return legalize_onnx(model, target or "ort-cpu", output, options, jetpack=jetpack, progress=progress,
                         force=force)


def build(
    model: Any,
    example_inputs: Any = None,
    target: str | Target | None = None,
    outdir: str | Path | None = None,
    options: BuildOptions | None = None,
    *,
    dynamic: Sequence[str] = (),
    exporters: Sequence[str] | None = None,
    accept_trace_warnings: bool = False,
    jetpack: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> BuildReport:
    """Legalize, build the target's engine, verify it, and write `outdir` atomically.

        build("model.onnx", "jetson-xavier", "out/", options)           an ONNX file
        build(module, (example,), target="jetson-xavier")               a torch.nn.Module
        build("model.pt2" | "model.pt" | "pkg.mod:factory", "jetson-xavier")   a torch model's file

    model: an ONNX file; a torch.nn.Module; a torch model's file (.pt2, .pt, `package.module:factory`);
    or, with `options.engine_only`, a device bundle (OUTDIR/bundle) whose engine alone is built.
    A torch model is exported by the target's exporters in order, at its opset ceiling, each export
    proven against torch; the kept one is built as an ONNX file is, and proven against torch again.
    example_inputs: a module's example inputs (a tensor, a tuple of them, or an .npz keyed by
    forward's parameter names). A model given as a file takes its target in this place, as the
    command line does: build("model.onnx", "jetson-xavier") is build("model.onnx", target="jetson-xavier").
    target: a target name, alias, .toml path or Target (default: ort-cpu; for a bundle, its own).
    outdir: the output directory (default: `<model stem>.<target>/` here). An existing one is
    refused unless `force` (or `options.force`), except a failed build's (its report only).
    options: deploycc.options.BuildOptions (precision, shapes, verification, bench, ...).
    dynamic: a torch model's axes to keep dynamic, as `name:axis[:min:opt:max]`.
    exporters: a torch model's exporters in order ("dynamo", "torchscript"; default: the target's).
    accept_trace_warnings: keep a torch trace that fixed what the inputs' data decides (a Python
    `if` on a value, `.item()`, `.numpy()`): refused otherwise (data-dependent-guard, with the line).
    jetpack: resolve a Jetson target at this JetPack release.
    progress: called with each stage's name as it starts.
    Returns the report (`report.exit_code`, `report.to_json()`; report.json and report.md in outdir).
    """
    import dataclasses

    from deploycc.options import BuildOptions as Options

    if not _in_memory(model) and (_names_targets(example_inputs, one=True) or
                                  (example_inputs is None and isinstance(outdir, Options))):
        example_inputs, target, outdir, options = _file_order(example_inputs, target, outdir, options,
                                                              Options)
    if force:
        options = dataclasses.replace(options or Options(), force=True)
    if _is_torch(model):
        return build_torch(model, example_inputs, target or "ort-cpu", outdir, options, dynamic=dynamic,
                           exporters=exporters, accept_trace_warnings=accept_trace_warnings,
                           jetpack=jetpack, progress=progress)
    _no_torch_arguments(model, example_inputs=example_inputs, dynamic=dynamic, exporters=exporters,
                        accept_trace_warnings=accept_trace_warnings)
    return build_onnx(model, target, outdir, options, jetpack=jetpack, progress=progress)


def _in_memory(model: Any) -> bool:
    """A model given as an object, whose second argument is its example inputs; a model given as a
    file (or a loaded TorchSource, which holds its inputs) takes its target(s) there, as the
    command line does."""
    return not isinstance(model, (str, Path)) and type(model).__name__ != "TorchSource"


def _names_targets(value: Any, *, one: bool = False) -> bool:
    """Whether `value` (the second argument) names a target, or with `one` False targets, rather
    than example inputs: a name, alias or .toml path (an .npz is inputs), a Target, or a list of them."""
    from deploycc.targets.schema import Target

    if isinstance(value, Target):
        return True
    if isinstance(value, str):
        return not value.endswith(".npz")
    if one or not isinstance(value, (list, tuple)) or not value:
        return False
    return all(isinstance(item, Target) or (isinstance(item, str) and not item.endswith(".npz"))
               for item in value)


def _file_order(first: Any, second: Any, third: Any, fourth: Any, options_type: type) -> tuple[Any, ...]:
    """(example_inputs, target, outdir, options) from a call in the file order
    f(path, target, outdir, options): each argument given by place moved to its parameter;
    those given by name (where the places say they must be) kept."""
    target, outdir, options = first, second, fourth
    if isinstance(third, options_type):  # f(path, target, outdir, options) by place
        if fourth is not None:
            raise OptionError("options given twice", hint="by place or by name, not both")
        options = third
    elif third is not None:  # f(path, target, outdir=...): or by place, with the target's place taken
        if second is not None:
            raise OptionError("the output given twice, or a target given twice",
                              hint="f(path, target, output) or f(path, target=..., output=...)")
        outdir = third
    if outdir is not None and not isinstance(outdir, (str, Path)):
        raise OptionError(f"{outdir!r}: not an output path",
                          hint="f(path, target, output, options), or each by name")
    return None, target, outdir, options


def _no_torch_arguments(model: Any, **given: Any) -> None:
    """An ONNX file takes no example inputs, dynamic axes or exporters: refused, not ignored."""
    named = [name for name, value in given.items() if value]
    if named:
        raise OptionError(f"{named[0]}= is for a torch model, and {model} is not one",
                          hint="a torch model: an nn.Module, model.pt2, model.pt or module.path:factory")
