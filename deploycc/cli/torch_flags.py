"""The flags that go with a PyTorch model (`MODEL` = model.pt2, model.pt or module.path:factory),
shared by `build`, `legalize` and `check`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from deploycc import api
from deploycc.errors import OptionError

TORCH_FLAGS = ("example_inputs", "input_specs", "dynamic", "exporter", "accept_trace_warnings")


def torch_options(command: Callable[..., Any]) -> Callable[..., Any]:
    flags = [
        click.option("--example-inputs", type=click.Path(dir_okay=False),
                     help="A torch MODEL's example inputs: an .npz keyed by forward's parameter names."),
        click.option("--input", "input_specs", multiple=True, metavar="NAME:DIMS[:DTYPE]",
                     help="A torch MODEL's example input, drawn at random, e.g. x:1x3x224x224:float32."),
        click.option("--dynamic", multiple=True, metavar="NAME:AXIS[:MIN:OPT:MAX]",
                     help="A torch MODEL: also export this axis dynamic (the batch is, unless the "
                          "target fixes it)."),
        click.option("--exporter", type=click.Choice(["auto", "dynamo", "torchscript", "optimum"]),
                     default="auto", show_default=True,
                     help="A torch MODEL: the exporter (auto: the target's order, the second when the "
                          "first fails; Optimum's for a transformers causal LM, with its KV cache)."),
        click.option("--accept-trace-warnings", is_flag=True,
                     help="A torch MODEL: keep a TorchScript trace that took a branch or a value from "
                          "the inputs' data (torch's TracerWarning); the traced path then holds for every "
                          "input."),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


def torch_source(model: str, flags: dict[str, Any]) -> Any:
    """The loaded torch model when MODEL names one, else None (refusing torch flags given with an
    ONNX file). Pops the torch flags from `flags`."""
    from deploycc.frontend import source_kind

    example_inputs, input_specs = flags.pop("example_inputs"), flags.pop("input_specs")
    dynamic, exporter = flags.pop("dynamic"), flags.pop("exporter")
    accept = flags.pop("accept_trace_warnings")
    if source_kind(model) is None:
        given = [name for name, value in (("--example-inputs", example_inputs), ("--input", input_specs),
                                          ("--dynamic", dynamic), ("--accept-trace-warnings", accept))
                 if value]
        if given or exporter != "auto":
            flag = given[0] if given else "--exporter"
            raise OptionError(f"{flag} is for a PyTorch model, and {model} is not one",
                              hint="MODEL: model.pt2, model.pt or module.path:factory")
        return None
    source = api.torch_source(model, example_inputs, dynamic=dynamic, input_specs=input_specs)
    source.exporters = None if exporter == "auto" else (exporter,)
    source.accept_trace_warnings = accept
    return source
