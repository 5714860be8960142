"""`deploycc legalize MODEL --target T -o OUT.onnx`."""

from __future__ import annotations

from pathlib import Path

import click

from deploycc import api
from deploycc.cli import emit
from deploycc.cli.torch_flags import torch_options
from deploycc.errors import OptionError
from deploycc.options import MODES, LegalizeOptions
from deploycc.passes import PASS_NAMES
from deploycc.taxonomy import LegalizeMode


def _split(values: tuple[str, ...]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _layouts(values: tuple[str, ...]) -> dict[str, str]:
    layouts = {}
    for value in values:
        name, sep, layout = value.rpartition(":")
        layouts[name if sep else "*"] = layout.upper()
    return layouts


def options_from_flags(shape: tuple[str, ...], batch: int | None, dynamic_batch: bool,
                       input_layout: tuple[str, ...], keep_outputs: tuple[str, ...], mode: str | None,
                       disable_pass: tuple[str, ...], only_pass: tuple[str, ...], simplifier: str | None,
                       opset: int | None, inputs: str | None, prove: bool, verify: bool,
                       fold_limit_mb: int, sample_shape: tuple[str, ...] = (),
                       keep_map_outputs: bool = False, disable_rule: tuple[str, ...] = ()) -> LegalizeOptions:
    from deploycc.passes.axes import parse_shape

    shapes = dict(parse_shape(text) for text in shape)
    samples = {}
    for text in sample_shape:
        name, dims = parse_shape(text)
        if not all(isinstance(d, int) for d in dims):
            raise OptionError(f"--sample-shape {text!r}: every dim must be a size")
        samples[name] = [int(d) for d in dims]
    if batch is not None and batch < 1:
        raise OptionError(f"--batch {batch}: must be at least 1")
    return LegalizeOptions(
        opset=opset, shapes=shapes, batch=batch, dynamic_batch=dynamic_batch,
        input_layout=_layouts(input_layout), keep_outputs=_split(keep_outputs) or None,
        keep_map_outputs=keep_map_outputs, mode=LegalizeMode(mode) if mode else None,
        disable_passes=tuple(_split(disable_pass)), only_passes=tuple(_split(only_pass)),
        disable_rules=tuple(_split(disable_rule)),
        simplifier=simplifier, prove=prove, verify=verify, inputs=Path(inputs) if inputs else None,
        fold_limit_bytes=fold_limit_mb << 20, sample_shapes=samples)


def pipeline_options(command=None, *, dynamic_batch_flag: bool = True):
    """The legalization flags, shared by `legalize` and `build` (whose --dynamic-batch takes a range)."""
    if command is None:
        return lambda f: pipeline_options(f, dynamic_batch_flag=dynamic_batch_flag)
    flags = [
        click.option("--shape", multiple=True, metavar="NAME:DIMS",
                     help="Fix an input's dims, e.g. input:1x3x224x224 (names keep a dim symbolic)."),
        click.option("--batch", type=int, help="Fix every dynamic batch (dim 0) to N."),
    ]
    if dynamic_batch_flag:
        flags.append(click.option("--dynamic-batch", is_flag=True,
                                  help="Keep dim 0 dynamic; every other dim must be fixed."))
    flags += [
        click.option("--input-layout", multiple=True, metavar="[NAME:]NHWC|NCHW",
                     help="The layout you will feed; a Transpose adapts it to the model's."),
        click.option("--keep-outputs", multiple=True, metavar="A,B", help="Keep only these graph outputs."),
        click.option("--keep-map-outputs", is_flag=True,
                     help="Keep ZipMap outputs (sequences of maps) where the target has no ZipMap, "
                          "instead of returning the probability tensor."),
        click.option("--mode", type=click.Choice([mode.value for mode in MODES]),
                     help="full: fail unless all legal (TensorRT/OpenVINO default); partial: leave "
                          "what the runtime falls back on (ORT default)."),
        click.option("--disable-pass", multiple=True, metavar="NAME",
                     help=f"Skip a pass ({', '.join(PASS_NAMES)})."),
        click.option("--only-pass", multiple=True, metavar="NAME", help="Run only these passes."),
        click.option("--disable-rule", multiple=True, metavar="NAME",
                     help="Set aside a rule inside a pass (a catalog rule, or a tidy/fuse step as the "
                          "report's blame names it; `deploycc rules` lists the catalog)."),
        click.option("--simplifier", type=click.Choice(["onnxsim"]),
                     help="Also run onnxsim (in a child process; needs deploycc[onnxsim])."),
        click.option("--opset", type=int, help="Convert to this opset instead of the target's choice."),
        click.option("--inputs", type=click.Path(dir_okay=False), help="Verify on these inputs (.npz)."),
        click.option("--sample-shape", multiple=True, metavar="NAME:DIMS",
                     help="Draw verification inputs at these sizes, the model's axes unchanged "
                          "(e.g. x:1x3x48x320 for a recognizer whose height is declared dynamic)."),
        click.option("--prove/--no-prove", default=True, show_default=True,
                     help="Prove each rewrite on ONNX Runtime as it is made."),
        click.option("--verify/--no-verify", default=True, show_default=True,
                     help="Compare the result with the original on ONNX Runtime CPU."),
        click.option("--fold-limit-mb", type=int, default=16, show_default=True,
                     help="Largest tensor constant folding may create."),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


@click.command("legalize")
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option("-t", "--target", default="ort-cpu", show_default=True, help="Target name, alias or .toml.")
@click.option("-o", "--output", type=click.Path(path_type=str),
              help="Where to write the legalized model (refused if it exists, unless --force).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--jetpack", help="Resolve a Jetson target at this JetPack release.")
@pipeline_options
@torch_options
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Also write the JSON report here.")
@click.option("--partition", is_flag=True,
              help="Write device and host segments into the OUTPUT directory, verified on ONNX Runtime.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report instead of tables.")
@click.pass_context
def legalize_command(ctx: click.Context, model: str, target: str, output: str | None, force: bool,
                     jetpack: str | None, report_path: str | None, partition: bool, as_json: bool,
                     **flags) -> None:
    """Rewrite MODEL into one TARGET accepts, proving every rewrite; write it atomically.

    MODEL is an ONNX file or a PyTorch model (model.pt2, model.pt, module.path:factory), exported
    for TARGET and proven against torch first.

    Exit code 0 when the result is legal (or partial mode) and verified, 1 when nodes stay
    illegal or verification fails (nothing is written then), 2 on bad input or options.
    """
    from deploycc.cli.torch_flags import torch_source
    from deploycc.report import console
    from deploycc.report.progress import progress_status

    example_inputs = flags.get("example_inputs")
    source = torch_source(model, flags)
    options = options_from_flags(**flags)
    if partition:
        from deploycc.errors import OptionError
        from deploycc.options import BuildOptions

        if output is None:
            raise OptionError("--partition writes a directory", hint="pass -o OUTDIR")
        with progress_status("partitioning", quiet=as_json):
            split = api.build_partitioned(source or model, target, Path(output),
                                          BuildOptions(legalize=options, bench=False, force=force,
                                                       choose_precision=False),
                                          jetpack=jetpack,
                                          build_engines=False)
        emit(split, as_json, console.render_partition)
        ctx.exit(split.exit_code)
    from deploycc import io

    # every file this command reads is an input its outputs must not be, the report included
    inputs = [Path(model), *(Path(p) for p in (options.inputs, example_inputs) if p)]
    with io.claim([Path(output) if output else None], inputs=inputs, force=force,
                  reports=[Path(report_path) if report_path else None]):
        with progress_status("legalizing", quiet=as_json) as update:
            if source is not None:
                report = api.legalize_torch(source, target=target, output=output, options=options,
                                            jetpack=jetpack, progress=update, force=force)
            else:
                report = api.legalize(model, target=target, output=output, options=options, jetpack=jetpack,
                                      progress=update, force=force)
        if report_path:
            io.write_text_atomic(Path(report_path), report.to_json())
    emit(report, as_json, console.render_legalize)
    ctx.exit(report.exit_code)
