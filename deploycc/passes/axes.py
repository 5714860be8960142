"""Axes: fix dynamic dimensions (--shape, --batch), keep the batch dynamic (--dynamic-batch),
refuse dynamic dims on static-shape targets, and adapt the input layout (--input-layout).

After a change, every inferred shape inside the graph is dropped and inferred again, so later
passes (folding Shape -> Gather -> Reshape chains) see the fixed sizes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from deploycc.errors import DynamicShapeError, OptionError
from deploycc.passes.base import Pass, PassOutcome, PipelineState

if TYPE_CHECKING:
    from collections.abc import Sequence

    import onnx_ir as ir

LAYOUT_PERMUTATIONS = {  # fed layout -> permutation that gives the model the other layout
    "NHWC": [0, 3, 1, 2],
    "NCHW": [0, 2, 3, 1],
}


def parse_shape(text: str) -> tuple[str, list[int | str]]:
    """'x:1x3x224x224' or 'x:N,3,224,224' -> ('x', [1, 3, 224, 224]); names stay symbolic."""
    name, sep, dims_text = text.rpartition(":")
    if not sep or not name or not dims_text:
        raise OptionError(f"--shape {text!r}: expected NAME:DIMS, e.g. input:1x3x224x224")
    dims: list[int | str] = []
    for token in re.split(r"[x,]", dims_text):
        token = token.strip()
        if re.fullmatch(r"\d+", token):
            dims.append(int(token))
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|\?|-1", token):
            dims.append(token if token not in ("?", "-1") else "dynamic")
        else:
            raise OptionError(f"--shape {text!r}: {token!r} is not a size or a dimension name")
    return name, dims


def _dims(value: ir.Value) -> list[int | str] | None:
    from deploycc.graph.graphs import dims_of

    return dims_of(value)


def _set_dims(value: ir.Value, dims: list[int | str]) -> None:
    import onnx_ir as ir

    value.shape = ir.Shape([d if isinstance(d, int) else ir.SymbolicDim(d if d != "?" else None)
                            for d in dims])


class AxesPass(Pass):
    name = "axes"
    summary = "fix dynamic dimensions, keep the batch dynamic, adapt the input layout"

    def run(self, state: PipelineState) -> PassOutcome:
        options = state.options
        graph = state.model.graph
        inputs = {v.name or "": v for v in graph.inputs if v.name not in graph.initializers}
        notes: list[str] = []
        changed = False
        for name in list(options.shapes) + [n for n in options.input_layout if n != "*"]:
            if name not in inputs:
                raise OptionError(f"the model has no input named {name!r}",
                                  hint=f"inputs: {', '.join(inputs) or 'none'}")
        fixed: dict[str, int] = {}  # symbolic dim name -> the size it was fixed at
        wanted = {name: self._wanted_dims(name, _dims(value), options, state)
                  for name, value in inputs.items()}
        for name, value in inputs.items():
            for was, now in zip(_dims(value) or [], wanted[name] or [], strict=False):
                if isinstance(was, str) and was != "?" and isinstance(now, int):  # "?": unnamed
                    if fixed.setdefault(was, now) != now:
                        raise OptionError(f"dim {was!r} is fixed at {fixed[was]} and at {now}; inputs "
                                          f"that name a dim alike share its size")
        for name, value in inputs.items():
            old = _dims(value)
            new = self._same_named_dims(wanted[name], fixed, kept=options.shapes.get(name))
            if new is not None and new != old:
                _set_dims(value, new)
                notes.append(f"{name}: {old} -> {new}")
                state.signature_changes.append(f"input {name} dims {old} -> {new}")
                changed = True
        self._require_static(inputs, state)
        for name, value in inputs.items():
            layout = options.input_layout.get(name, options.input_layout.get("*"))
            if layout is not None:
                if self._insert_layout_transpose(graph, value, layout):
                    state.fed_layouts[name] = LAYOUT_PERMUTATIONS[layout.upper()]
                    notes.append(f"{name}: fed as {layout}, transposed for the model")
                    state.signature_changes.append(f"input {name} layout {layout}")
                    changed = True
        if changed:
            self._reinfer(state, fixed)
        return PassOutcome(changed, notes)

    @staticmethod
    def _wanted_dims(name: str, old: list[int | str] | None, options, state: PipelineState
                     ) -> list[int | str] | None:
        if name in options.shapes:
            new = list(options.shapes[name])
            if old is not None and len(old) != len(new):
                raise OptionError(f"--shape {name}: {len(new)} dims given, the input has rank {len(old)}")
            for i, (was, given) in enumerate(zip(old or [], new, strict=False)):
                if isinstance(was, int) and isinstance(given, int) and was != given:
                    raise OptionError(f"--shape {name}: dim {i} is fixed at {was} in the model, not {given}")
                if given == "dynamic":  # keep what the model says for this dim
                    new[i] = was
            return new
        if old is None:
            return None
        new = list(old)
        if old and not isinstance(old[0], int) and options.batch is not None and not options.dynamic_batch:
            new[0] = options.batch
        return new

    @staticmethod
    def _same_named_dims(dims: list[int | str] | None, fixed: dict[str, int],
                         kept: Sequence[int | str] | None) -> list[int | str] | None:
        """A dim named like one that was fixed takes its size: ONNX gives one size to one dim name
        in a graph (Silero's `state` shares `batch` with `input` at dim 1, so `--batch 1` fixes it
        too), except where --shape said `dynamic` for that dim."""
        if dims is None:
            return None
        return [fixed.get(d, d) if isinstance(d, str) and (kept is None or kept[i] != "dynamic") else d
                for i, d in enumerate(dims)]

    @staticmethod
    def _require_static(inputs: dict[str, ir.Value], state: PipelineState) -> None:
        from deploycc.graph.graphs import dynamic_dims

        options = state.options
        problems = []
        for name, value in inputs.items():
            dims = dynamic_dims(value)
            if options.dynamic_batch:
                dims = [(i, d) for i, d in dims if i != 0]
            if dims:
                problems.append(f"{name}[{', '.join(f'{i}:{d}' for i, d in dims)}]")
        if not problems:
            return
        if options.dynamic_batch:
            raise DynamicShapeError(f"--dynamic-batch keeps only dim 0 dynamic; fix these with --shape: "
                              f"{'; '.join(problems)}")
        if state.target.shapes.policy == "static":
            raise DynamicShapeError(f"{state.target.name} needs static shapes; these input dims are dynamic: "
                              f"{'; '.join(problems)}", hint="fix them with --shape NAME:DIMS or --batch N")

    @staticmethod
    def _insert_layout_transpose(graph: ir.Graph, value: ir.Value, layout: str) -> bool:
        import onnx_ir as ir

        layout = layout.upper()
        if layout not in LAYOUT_PERMUTATIONS:
            raise OptionError(f"--input-layout {layout!r}: expected NHWC or NCHW")
        dims = _dims(value)
        if dims is None or len(dims) != 4:
            return False
        perm = LAYOUT_PERMUTATIONS[layout]
        inverse = [perm.index(i) for i in range(4)]
        fed = ir.Value(name=value.name, type=value.type,
                       shape=ir.Shape([value.shape[i] for i in inverse]))  # type: ignore[index]
        value.name = f"{value.name}__model_layout"
        transpose = ir.Node("", "Transpose", [fed], attributes=[ir.AttrInt64s("perm", perm)],
                            name=f"{fed.name}/layout", num_outputs=1)
        transposed = transpose.outputs[0]
        transposed.name = f"{fed.name}__transposed"
        transposed.type, transposed.shape = value.type, value.shape
        value.replace_all_uses_with(transposed)
        index = graph.inputs.index(value)
        graph.inputs[index] = fed
        graph.insert_before(graph.node(0), transpose) if len(graph) else graph.append(transpose)
        return True

    @staticmethod
    def _reinfer(state: PipelineState, fixed: dict[str, int]) -> None:
        """Drop every inferred shape and infer again from the new input dims. A graph output whose
        shape inference cannot follow (computed through Shape -> Gather -> Concat -> Reshape, as
        in flatten heads) keeps its declared shape, with the dims named like a fixed input dim
        set to that size: the graph's signature (and so its rank) never silently changes."""
        from deploycc.graph.graphs import all_graphs
        from deploycc.graph.shapes import infer_shapes

        graph = state.model.graph
        kept = {id(v) for v in graph.inputs} | {id(v) for v in graph.outputs} | \
            {id(v) for v in graph.initializers.values()}
        for sub in all_graphs(graph):
            for node in sub:
                for value in node.outputs:
                    if id(value) not in kept:
                        value.shape = None
        declared = {}
        for value in graph.outputs:  # outputs keep their rank; their sizes are inferred anew
            if value.shape is not None and value.producer() is not None:
                declared[id(value)] = [fixed.get(d, d) if isinstance(d, str) else d
                                       for d in _dims(value) or []]
                value.shape = None
        note = infer_shapes(state.model)
        if note:
            state.notes.append(note)
        for value in graph.outputs:
            dims = declared.get(id(value))
            if dims is not None and (value.shape is None or len(value.shape) != len(dims)):
                _set_dims(value, dims)
