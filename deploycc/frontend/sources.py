"""What the user gave, loaded: a module, its example inputs and their names, and the axes the
user (or a `.pt2`'s own dim constraints) declared dynamic.

    model.pt2             torch.export.save's archive: an ExportedProgram, its example inputs and dims
    model.pt              torch.jit.save's archive (a TorchScript module); example inputs by flag
    package.module:make   a callable returning an nn.Module, or (module, example_inputs)
    path/to/file.py:make  the same, from a file
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploycc import budget
from deploycc.errors import ModelInputError, OptionError
from deploycc.frontend import FACTORY, first_line, source_kind
from deploycc.frontend.causal_lm import example_prompt, is_causal_lm

DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool")
GUARDS_HINT = "data_guards"  # in STEM.pt.hints.json: what save_archive's trace fixed
INTEGER_RANGE = (0, 10)  # what `--input name:dims:int64` draws: a valid index for most vocabularies


@dataclass(frozen=True)
class Axis:
    """A dynamic axis of one input, with the range the user gave (`--dynamic x:2:32:224:512`)."""

    name: str
    low: int | None = None
    opt: int | None = None
    high: int | None = None


@dataclass
class TorchSource:
    """A torch model ready to export: `inputs` are the example tensors, in forward's order."""

    module: Any
    inputs: tuple[Any, ...]
    names: list[str]
    label: str  # what the user gave: a path, `module:factory`, or the module's class name
    kind: str  # pt2 | torchscript | factory | module
    dynamic: dict[str, dict[int, Axis]] = field(default_factory=dict)  # input name -> axis -> range
    program: Any = None  # a .pt2's ExportedProgram, exported as it is by dynamo
    exporters: tuple[str, ...] | None = None  # the exporters to try, in order (None: the target's)
    # keep a trace whose path the inputs' data chose (--accept-trace-warnings); refused otherwise
    accept_trace_warnings: bool = False
    output_names: list[str] | None = None  # what the export names its outputs (the module's own)
    # a TorchScript archive deploycc traced itself (save_archive): where the inputs' data decided
    traced_guards: list[str] = field(default_factory=list)

    def shapes(self) -> dict[str, list[int]]:
        return {name: list(tensor.shape) for name, tensor in zip(self.names, self.inputs, strict=True)}


def torch_module() -> Any:
    """torch, or a one-line error that says how to get it (torch is an optional extra)."""
    try:
        import torch
    except ImportError:
        raise OptionError("a PyTorch model needs torch, which is not installed",
                          hint="pip install 'deploycc[torch]'") from None
    return torch


def load_source(spec: str | Path, *, example_inputs: Path | None = None, input_specs: tuple[str, ...] = (),
                dynamic_specs: tuple[str, ...] = ()) -> TorchSource:
    """The torch model `spec` names (see the module's docstring), with its example inputs: from
    `example_inputs` (an .npz keyed by input name), else `--input name:dims[:dtype]`, else the
    factory's or the .pt2's own."""
    kind = source_kind(spec)
    if kind == "factory":  # the user's own code, run as asked: bounded by half the machine only
        budget.note_model_bytes(budget.machine_memory())
    elif Path(spec).is_file():
        budget.note_model_bytes(Path(spec).stat().st_size)
    torch = torch_module()
    label = str(spec)
    given: tuple[Any, ...] | None = None
    guards: list[str] = []
    program = None
    constraints: dict[str, dict[int, Axis]] = {}
    if kind == "pt2":
        program = _load_pt2(Path(spec), torch)
        module = program.module()
        names = _program_input_names(program)
        given = tuple(program.example_inputs[0]) if program.example_inputs else None
        constraints = _program_dims(program, names)
    elif kind == "torchscript":
        module = _load_torchscript(Path(spec), torch)
        names = _script_input_names(module)
        guards = _traced_guards(Path(spec))
    elif kind == "factory":
        module, given = _call_factory(label, torch)
        names = _forward_names(module, len(given) if given else None)
    else:
        raise OptionError(f"{spec}: not a PyTorch model (.pt2, .pt, or module.path:factory)")
    source = with_inputs(module, given, names=names, label=label, kind=kind, example_inputs=example_inputs,
                         input_specs=input_specs, dynamic_specs=dynamic_specs, constraints=constraints,
                         program=program)
    source.traced_guards = guards
    return source


def _traced_guards(path: Path) -> list[str]:
    """Where the inputs' data decided when save_archive traced this archive (its hints file)."""
    import json

    try:
        guards = json.loads(path.with_name(path.name + ".hints.json").read_text()).get(GUARDS_HINT, [])
    except (OSError, ValueError, AttributeError):
        return []
    return [str(guard) for guard in guards] if isinstance(guards, list) else []


def with_inputs(module: Any, given: Any, *, names: list[str] | None = None, label: str | None = None,
                kind: str = "module", example_inputs: Path | None = None, input_specs: tuple[str, ...] = (),
                dynamic_specs: tuple[str, ...] = (), constraints: dict[str, dict[int, Axis]] | None = None,
                program: Any = None) -> TorchSource:
    """A TorchSource from a module and whatever says its inputs (the API's entry as well)."""
    torch = torch_module()
    if not isinstance(module, torch.nn.Module) and not isinstance(module, torch.jit.ScriptModule):
        raise OptionError(f"{label or type(module).__name__}: not a torch.nn.Module "
                          f"(a {type(module).__name__})")
    try:
        module.eval()
    except NotImplementedError:  # a .pt2's module is in eval mode already and refuses the call
        pass
    if given is not None:
        import numpy as np

        given = (given,) if isinstance(given, (torch.Tensor, np.ndarray)) else tuple(given)
        given = tuple(torch.from_numpy(np.ascontiguousarray(item)) if isinstance(item, np.ndarray) else item
                      for item in given)
    names = names or _forward_names(module, len(given) if given else None)
    if example_inputs is not None:
        given = _from_npz(example_inputs, names, torch)
    elif input_specs:
        given, names = _from_specs(input_specs, names, torch)
    if not given and is_causal_lm(module):  # a prompt of token ids (causal_lm.py)
        given, names = (example_prompt(module),), ["input_ids"]
    if not given:
        raise OptionError(f"{label or type(module).__name__}: no example inputs",
                          hint="pass --example-inputs x.npz or --input name:1x3x224x224[:dtype]")
    for index, tensor in enumerate(given):
        if not isinstance(tensor, torch.Tensor):
            raise OptionError(f"example input {index} is a {type(tensor).__name__}, not a tensor",
                              hint="the front end exports modules whose inputs are tensors")
    names = (names + [f"input_{i}" for i in range(len(names), len(given))])[:len(given)]
    dynamic = dict(constraints or {})
    for text in dynamic_specs:
        name, axis, bounds = parse_dynamic(text, names)
        dynamic.setdefault(name, {})[axis] = bounds
    for name, axes in dynamic.items():
        rank = given[names.index(name)].dim()
        if any(not 0 <= axis < rank for axis in axes):
            raise OptionError(f"--dynamic {name}: axis out of range for a rank-{rank} input")
    return TorchSource(module=module, inputs=given, names=names, label=label or type(module).__name__,
                       kind=kind, dynamic=dynamic, program=program)


def save_archive(source: TorchSource, folder: Path, stem: str) -> Path:
    """`source` as a file another process loads (an audit cell runs in its own): a torch.export
    archive (.pt2, with its example inputs; a .pt2 source's own program, dims included, as it is)
    where torch.export takes the module,
    else a TorchScript trace (.pt, which only the TorchScript exporter reads), with its example
    inputs beside it as STEM.inputs.npz named in STEM.pt.hints.json. An archive of the same module
    (its code, weights and example inputs: STEM.digest) is kept as it is, so the audit's cells of
    an unchanged module are reused (torch writes the same module to different bytes)."""
    import json

    import numpy as np

    torch = torch_module()
    folder.mkdir(parents=True, exist_ok=True)
    inputs = dict(zip(source.names, (t.detach().cpu().numpy() for t in source.inputs), strict=True))
    digest = _module_digest(source, inputs)
    stamp = folder / f"{stem}.digest"
    for kept in (folder / f"{stem}.pt2", folder / f"{stem}.pt"):
        if kept.is_file() and stamp.is_file() and stamp.read_text() == digest:
            return kept
        kept.unlink(missing_ok=True)
    try:
        program = source.program or torch.export.export(source.module, source.inputs, strict=False)
        path = folder / f"{stem}.pt2"
        torch.export.save(program, str(path))
    except Exception:  # a data-dependent guard, or a module torch.export does not take
        import warnings

        from deploycc.frontend.trace_guard import TraceFindings, watched

        path = folder / f"{stem}.pt"
        findings = TraceFindings()
        with warnings.catch_warnings(), watched(source.module, findings):
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(source.module, source.inputs, check_trace=False)
        torch.jit.save(traced, str(path))
        np.savez(folder / f"{stem}.inputs.npz", **inputs)
        # what the trace fixed of the inputs' data goes with it: the cell refuses it as a trace would
        hints = {"inputs": f"{stem}.inputs.npz", GUARDS_HINT: findings.guards}
        path.with_name(path.name + ".hints.json").write_text(json.dumps(hints))
    stamp.write_text(digest)
    return path


def _module_digest(source: TorchSource, inputs: dict[str, Any]) -> str:
    import hashlib
    import inspect

    digest = hashlib.sha256(f"{type(source.module).__module__}.{type(source.module).__qualname__}".encode())
    try:
        digest.update(inspect.getsource(type(source.module)).encode())
    except (OSError, TypeError):  # defined where its source cannot be read
        pass
    uint8 = torch_module().uint8
    for name, tensor in source.module.state_dict().items():
        digest.update(name.encode())
        try:  # any dtype, bfloat16 included, as its raw bytes
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(uint8).numpy().tobytes())
        except (RuntimeError, TypeError):  # a quantized or sparse tensor: its printed form
            digest.update(repr(tensor).encode())
    for name, array in inputs.items():
        digest.update(name.encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def parse_dynamic(text: str, names: list[str]) -> tuple[str, int, Axis]:
    """`name:axis[:min:opt:max]` (opt may be left out: `name:axis:min:max`)."""
    parts = text.split(":")
    if len(parts) not in (2, 4, 5) or not all(p.isdigit() for p in parts[1:]):
        raise OptionError(f"--dynamic {text!r}: expected NAME:AXIS or NAME:AXIS:MIN:OPT:MAX, e.g. x:0:1:8:32")
    name, axis = parts[0], int(parts[1])
    if name not in names:
        raise OptionError(f"--dynamic {text!r}: no input named {name!r}", hint=f"inputs: {', '.join(names)}")
    bounds = [int(p) for p in parts[2:]]
    if len(bounds) == 2:
        bounds = [bounds[0], bounds[1], bounds[1]]
    if bounds and not 1 <= bounds[0] <= bounds[1] <= bounds[2]:
        raise OptionError(f"--dynamic {text!r}: needs 1 <= MIN <= OPT <= MAX")
    label = f"{name}_dim{axis}" if axis else "batch"
    return name, axis, Axis(label, *bounds) if bounds else Axis(label)


def _load_pt2(path: Path, torch: Any) -> Any:
    if not path.is_file():
        raise ModelInputError(f"{path}: no such file")
    import logging

    from deploycc.frontend.pt2_archive import read_checked

    checked = read_checked(path, torch)  # torch reads these bytes, not the file again
    logger = logging.getLogger("torch.export")  # logs its own traceback before raising
    level, logger.level = logger.level, logging.CRITICAL
    try:
        return torch.export.load(checked)
    except Exception as error:
        raise ModelInputError(
            f"{path}: not a torch.export archive ({first_line(error)})",
            hint="write it with torch.export.save(torch.export.export(model, args), path)") from None
    finally:
        logger.setLevel(level)


def _load_torchscript(path: Path, torch: Any) -> Any:
    if not path.is_file():
        raise ModelInputError(f"{path}: no such file")
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except Exception as error:
        raise ModelInputError(
            f"{path}: not a TorchScript archive ({first_line(error)})",
            hint="a state_dict saved with torch.save is weights, not a model: give module.path:factory") \
            from None


def _call_factory(spec: str, torch: Any) -> tuple[Any, tuple[Any, ...] | None]:
    match = FACTORY.match(spec)
    assert match is not None
    where, name = match.group("module"), match.group("factory")
    try:
        if where.endswith(".py"):
            file = Path(where)
            if not file.is_file():
                raise ModelInputError(f"{where}: no such file")
            loaded = importlib.util.spec_from_file_location(f"deploycc_factory_{file.stem}", file)
            assert loaded is not None and loaded.loader is not None
            module = importlib.util.module_from_spec(loaded)
            sys.path.insert(0, str(file.resolve().parent))  # the file's own imports of its neighbours
            try:
                loaded.loader.exec_module(module)
            finally:
                sys.path.remove(str(file.resolve().parent))
        else:
            # the current directory first, as `python -m` has it: `mymodels:cnn` beside mymodels.py
            sys.path.insert(0, os.getcwd())
            try:
                module = importlib.import_module(where)
            finally:
                sys.path.remove(os.getcwd())
    except ModelInputError:
        raise
    except Exception as error:
        raise ModelInputError(f"{spec}: cannot import {where} ({type(error).__name__}: "
                              f"{first_line(error)})") from None
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise ModelInputError(f"{spec}: {where} has no callable {name!r}")
    try:
        made = factory()
    except Exception as error:
        raise ModelInputError(f"{spec}: the factory failed ({type(error).__name__}: {first_line(error)})") \
            from None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        return made[0], made[1]
    if isinstance(made, torch.nn.Module):
        return made, None
    raise ModelInputError(f"{spec}: the factory returned a {type(made).__name__}, "
                          "not an nn.Module or (module, example_inputs)")


def _forward_names(module: Any, count: int | None) -> list[str]:
    """The names of forward's positional parameters: what the ONNX inputs are called."""
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names if count is None else names[:count]


def _script_input_names(module: Any) -> list[str]:
    try:
        return [argument.name for argument in module.forward.schema.arguments[1:]]
    except AttributeError:
        return []


def _program_input_names(program: Any) -> list[str]:
    from torch.export.graph_signature import InputKind

    return [spec.arg.name for spec in program.graph_signature.input_specs
            if spec.kind == InputKind.USER_INPUT]


def _program_dims(program: Any, names: list[str]) -> dict[str, dict[int, Axis]]:
    """The dims an ExportedProgram keeps symbolic, with their range constraints."""
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    ranges = {str(symbol): bounds for symbol, bounds in program.range_constraints.items()}
    dims: dict[str, dict[int, Axis]] = {}
    for name in names:
        node = placeholders.get(name)
        value = node.meta.get("val") if node is not None else None
        for axis, size in enumerate(getattr(value, "shape", ())):
            if isinstance(size, int):
                continue
            bounds = ranges.get(str(size))
            low = _finite(getattr(bounds, "lower", None))
            high = _finite(getattr(bounds, "upper", None))
            dims.setdefault(name, {})[axis] = Axis(str(size), low, None, high)
    return dims


def _finite(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number < 2**31 else None


def _from_npz(path: Path, names: list[str], torch: Any) -> tuple[Any, ...]:
    import numpy as np

    budget.require_npz(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError) as error:
        raise OptionError(f"--example-inputs {path}: not an .npz file ({first_line(error)})") from None
    if names and all(name in arrays for name in names):
        ordered = [arrays[name] for name in names]
    elif all(key.startswith("arr_") for key in arrays):
        ordered = [arrays[f"arr_{i}"] for i in range(len(arrays))]
    else:
        missing = [name for name in names if name not in arrays]
        raise OptionError(f"--example-inputs {path}: no array for {', '.join(missing)}",
                          hint=f"key the arrays by forward's parameter names: {', '.join(names)}")
    return tuple(torch.from_numpy(np.ascontiguousarray(array)) for array in ordered)


def _from_specs(specs: tuple[str, ...], names: list[str], torch: Any) -> tuple[tuple[Any, ...], list[str]]:
    """Random example tensors from `--input name:1x3x224x224[:dtype]`, in forward's order."""
    generator = torch.Generator().manual_seed(0)
    made: dict[str, Any] = {}
    for text in specs:
        match = re.fullmatch(r"([^:]+):(\d+(?:x\d+)*|scalar)(?::(\w+))?", text)
        if not match:
            raise OptionError(f"--input {text!r}: expected NAME:DIMS[:DTYPE], e.g. x:1x3x224x224:float32")
        name, dims_text, dtype = match.group(1), match.group(2), match.group(3) or "float32"
        if dtype not in DTYPES:
            raise OptionError(f"--input {text!r}: unknown dtype {dtype}", hint=f"one of {', '.join(DTYPES)}")
        dims = [] if dims_text == "scalar" else [int(d) for d in dims_text.split("x")]
        torch_dtype = getattr(torch, dtype)
        if dtype == "bool":
            made[name] = torch.randint(0, 2, dims, generator=generator).bool()
        elif torch_dtype.is_floating_point:
            made[name] = torch.randn(dims, generator=generator).to(torch_dtype)
        else:
            made[name] = torch.randint(*INTEGER_RANGE, dims, generator=generator).to(torch_dtype)
    order = [name for name in names if name in made] + [name for name in made if name not in names]
    if names and order[:len(made)] != names[:len(made)]:
        unknown = [name for name in made if name not in names]
        raise OptionError(f"--input: {', '.join(unknown) or 'the inputs'} do not match forward's "
                          f"parameters ({', '.join(names)})", hint="give the leading parameters by name")
    return tuple(made[name] for name in order), order

