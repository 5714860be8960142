"""Hostile models and files, written by hand as an attacker would: each asks for far more memory,
time or trust than it is worth. They are made here, in a few KB each (nothing in this module
materialises what a file asks for), for the fuzz suite (`test_bombs.py`, one per class in
`make test`) and its full run (`benchmarks/hostile/run.py`, every file through every command,
with exit code, wall time and peak RSS).

A bomb is a name, its class, the commands it goes through, and a function that writes it into a
folder and returns the path to give the command.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

MODEL_COMMANDS = ("check", "legalize", "build")
TERA = 10**12


@dataclass(frozen=True)
class Bomb:
    name: str
    kind: str  # memory, time, declared-size, inputs-file, malformed, device-import
    write: Callable[[Path], Path]
    commands: tuple[str, ...] = MODEL_COMMANDS


def _model(nodes, inputs, outputs, initializers=(), opset=17, functions=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "bomb", inputs, outputs, list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], functions=list(functions)
    )
    model.ir_version = 8
    return model


def _float(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _int64(name: str, values, dims=None) -> onnx.TensorProto:
    values = list(values)
    return helper.make_tensor(name, TensorProto.INT64, [len(values)] if dims is None else dims, values)


def _saved(model: onnx.ModelProto, name: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        return path

    return write


def _plus_input(node_output: str, extra_nodes=()) -> list[onnx.NodeProto]:
    """y = x + ReduceSum(bomb): the bomb feeds the model's one output, so nothing prunes it."""
    return [
        *extra_nodes,
        helper.make_node("ReduceSum", [node_output], ["total"], keepdims=0),
        helper.make_node("Add", ["x", "total"], ["y"]),
    ]


def _growing(name: str, op: str, inputs: list[str], initializers, **attributes) -> Bomb:
    nodes = _plus_input("big", [helper.make_node(op, inputs, ["big"], **attributes)])
    model = _model(nodes, [_float("x", [1])], [_float("y", [1])], initializers)
    return Bomb(name, "memory", _saved(model, name))


def _memory_bombs() -> list[Bomb]:
    one = helper.make_tensor("one", TensorProto.FLOAT, [1, 1], [1.0])
    bombs = [
        _growing("tile-constant-1e12", "Tile", ["one", "reps"], [one, _int64("reps", [10**6, 10**6])]),
        _growing("tile-constant-5e9", "Tile", ["one", "reps"], [one, _int64("reps", [50_000, 100_000])]),
        _growing(
            "range-int-1e12",
            "Range",
            ["a", "b", "c"],
            [_int64("a", [0], []), _int64("b", [TERA], []), _int64("c", [1], [])],
        ),
        _growing(
            "range-float-tiny-delta",
            "Range",
            ["a", "b", "c"],
            [
                helper.make_tensor("a", TensorProto.FLOAT, [], [0.0]),
                helper.make_tensor("b", TensorProto.FLOAT, [], [1.0]),
                helper.make_tensor("c", TensorProto.FLOAT, [], [1e-12]),
            ],
        ),
        _growing(
            "range-int-5e9",
            "Range",
            ["a", "b", "c"],
            [_int64("a", [0], []), _int64("b", [5 * 10**9], []), _int64("c", [1], [])],
        ),
        _growing("constant-of-shape-1e12", "ConstantOfShape", ["shape"], [_int64("shape", [10**6, 10**6])]),
        _growing("expand-1e12", "Expand", ["one", "shape"], [one, _int64("shape", [10**6, 10**6])]),
        _growing(
            "onehot-depth-1e12",
            "OneHot",
            ["idx", "depth", "vals"],
            [
                _int64("idx", [0]),
                _int64("depth", [TERA], []),
                helper.make_tensor("vals", TensorProto.FLOAT, [2], [0.0, 1.0]),
            ],
        ),
        _growing("pad-1e12", "Pad", ["one", "pads"], [one, _int64("pads", [0, 0, 10**6, 10**6])]),
        _growing(
            "resize-scales-1e12",
            "Resize",
            ["one4", "", "scales"],
            [
                helper.make_tensor("one4", TensorProto.FLOAT, [1, 1, 1, 1], [1.0]),
                helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 1e6, 1e6]),
            ],
        ),
    ]
    # The same sizes reached only at run time: the repeats follow from the input's value or shape.
    runtime = [
        (
            "tile-runtime-repeats",
            [
                helper.make_node("Cast", ["n"], ["reps"], to=TensorProto.INT64),
                helper.make_node("Tile", ["x", "reps"], ["big"]),
            ],
            [_float("x", [1]), helper.make_tensor_value_info("n", TensorProto.FLOAT, [1])],
        ),
        (
            "tile-from-shape",
            [
                helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Mul", ["s", "huge"], ["reps"]),
                helper.make_node("Tile", ["x", "reps"], ["big"]),
            ],
            [_float("x", [1])],
        ),
        (
            "range-runtime-limit",
            [
                helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                helper.make_node("Mul", ["m", "f"], ["limit"]),
                helper.make_node("Range", ["zero", "limit", "step"], ["big"]),
            ],
            [_float("x", [1])],
        ),
        (
            "outer-product-declared-1e6",
            [helper.make_node("MatMul", ["col", "row"], ["big"])],
            [_float("x", [1]), _float("col", [10**6, 1]), _float("row", [1, 10**6])],
        ),
        (
            "broadcast-add-declared-1e6",
            [helper.make_node("Add", ["col", "row"], ["big"])],
            [_float("x", [1]), _float("col", [10**6, 1]), _float("row", [1, 10**6])],
        ),
    ]
    inits = [
        _int64("huge", [TERA]),
        helper.make_tensor("f", TensorProto.FLOAT, [], [1e12]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("step", TensorProto.FLOAT, [], [1.0]),
    ]
    for name, nodes, inputs in runtime:
        used = {i for node in nodes for i in node.input}
        model = _model(
            _plus_input("big", nodes), inputs, [_float("y", [1])], [t for t in inits if t.name in used]
        )
        bombs.append(Bomb(name, "memory", _saved(model, name)))
    # Many constants, each under any one-node limit, that together are large.
    tiles = [helper.make_node("Tile", ["one", "reps"], [f"t{i}"]) for i in range(40)]
    total = helper.make_node("Concat", [f"t{i}" for i in range(40)], ["big"], axis=0)
    model = _model(
        _plus_input("big", [*tiles, total]),
        [_float("x", [1])],
        [_float("y", [1])],
        [one, _int64("reps", [5_000_000, 1])],
    )
    bombs.append(Bomb("many-tiles-concat", "memory", _saved(model, "many-tiles-concat")))
    return bombs


def _loop(name: str, trips: int, scan: bool) -> Bomb:
    body_outputs = [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _float("acc_out", [1])]
    body_nodes = [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Add", ["acc_in", "one_f"], ["acc_out"]),
    ]
    if scan:
        body_nodes.append(helper.make_node("Identity", ["acc_out"], ["scanned"]))
        body_outputs.append(_float("scanned", [1]))
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            _float("acc_in", [1]),
        ],
        body_outputs,
    )
    outputs = ["acc"] + (["stack"] if scan else [])
    nodes = [
        helper.make_node("Loop", ["trips", "cond", "x"], outputs, body=body),
        helper.make_node("Identity", ["acc"], ["y"]),
    ]
    graph_outputs = [_float("y", [1])] + ([_float("stack", None)] if scan else [])
    inits = [
        _int64("trips", [trips], []),
        helper.make_tensor("cond", TensorProto.BOOL, [], [True]),
        helper.make_tensor("one_f", TensorProto.FLOAT, [1], [1.0]),
    ]
    return Bomb(name, "time", _saved(_model(nodes, [_float("x", [1])], graph_outputs, inits), name))


def _nested_ifs(depth: int) -> onnx.ModelProto:
    """An If whose branches hold an If, `depth` deep: walkers that recurse per subgraph."""
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["r0"])], "leaf", [], [_float("r0", [1])])
    inner = leaf
    for level in range(1, depth + 1):  # one branch nests, the other is a leaf: linear in depth
        node = helper.make_node("If", ["c"], [f"r{level}"], then_branch=inner, else_branch=leaf)
        inner = helper.make_graph([node], f"g{level}", [], [_float(f"r{level}", [1])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        *inner.node,
        helper.make_node("Identity", [f"r{depth}"], ["y"]),
    ]
    return _model(
        nodes,
        [_float("x", [1])],
        [_float("y", [1])],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )


def _recursive_function() -> onnx.ModelProto:
    """A model-local function that calls itself: inlining it never ends."""
    body = [helper.make_node("F", ["a"], ["b"], domain="local")]
    function = helper.make_function(
        "local", "F", ["a"], ["b"], body, [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    )
    model = _model(
        [helper.make_node("F", ["x"], ["y"], domain="local")],
        [_float("x", [1])],
        [_float("y", [1])],
        functions=[function],
    )
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def _long_chain(length: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", [f"v{i}" if i else "x"], [f"v{i + 1}" if i + 1 < length else "y"])
        for i in range(length)
    ]
    return _model(nodes, [_float("x", [1, 8])], [_float("y", [1, 8])])


def _time_bombs() -> list[Bomb]:
    return [
        _loop("loop-1e9-trips", 10**9, scan=False),
        _loop("loop-1e9-trips-scan", 10**9, scan=True),
        _loop("loop-max-int64-trips", 2**63 - 1, scan=True),
        Bomb("nested-ifs-24", "time", _saved(_nested_ifs(24), "nested-ifs-24")),
        Bomb("recursive-function", "time", _saved(_recursive_function(), "recursive-function")),
        Bomb("relu-chain-20000", "time", _saved(_long_chain(20_000), "relu-chain-20000")),
    ]


def _declared(name: str, dims) -> Bomb:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", dims)], [_float("y", dims)])
    return Bomb(name, "declared-size", _saved(model, name))


def _declared_bombs() -> list[Bomb]:
    bombs = [
        _declared("input-2e40", [2**40]),
        _declared("input-2e34", [2**34]),
        _declared("input-2e20-squared", [2**20, 2**20]),
        _declared("input-2e62", [2**62]),
        _declared("input-product-overflows-int64", [2**40, 2**40]),
        _declared("input-5e9", [5 * 10**9]),
        _declared("input-negative-dim", [-7, 3]),
        _declared("input-many-dims", [2] * 64),
    ]
    # An initializer whose dims claim 2^40 elements with (almost) no data behind them.
    lying = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    del lying.dims[:]
    lying.dims.extend([2**20, 2**20])
    model = _model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [_float("x", [1])], [_float("y", [1])], [lying]
    )
    bombs.append(Bomb("initializer-dims-lie", "declared-size", _saved(model, "initializer-dims-lie")))
    many = [_float(f"x{i}", [1]) for i in range(3000)]
    nodes = [helper.make_node("Sum", [f"x{i}" for i in range(3000)], ["y"])]
    bombs.append(
        Bomb("inputs-3000", "declared-size", _saved(_model(nodes, many, [_float("y", [1])]), "inputs-3000"))
    )
    return bombs


def _npz_header_bomb(folder: Path, name: str, shape, dtype="<f4") -> Path:
    """An .npz whose one array's header declares `shape`, with 16 bytes of data."""
    header = {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    text = repr(header).encode() + b" "
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    body = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + b"\x00" * 16
    path = folder / f"{name}.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", body)
    return path


def _relu_with_inputs(folder: Path, inputs_file: Path) -> Path:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", ["n"])], [_float("y", ["n"])])
    path = folder / f"{inputs_file.stem}-model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _inputs_bomb(name: str, make_npz: Callable[[Path], Path]) -> Bomb:
    """The model is honest; the file given to --inputs is the bomb. The path returned is the
    model's; the runner gives `--inputs` the .npz beside it (`inputs_file`)."""

    def write(folder: Path) -> Path:
        return _relu_with_inputs(folder, make_npz(folder))

    return Bomb(name, "inputs-file", write, ("check", "build"))


def inputs_file(model: Path) -> Path | None:
    """The --inputs file an inputs-file bomb wrote beside its model."""
    candidate = model.with_name(model.name.removesuffix("-model.onnx") + ".npz")
    return candidate if model.name.endswith("-model.onnx") and candidate.is_file() else None


def _npz_zip_bomb(folder: Path) -> Path:
    """1.5 GB of zeros compressed to about 1.5 MB."""
    path = folder / "npz-zip-bomb.npz"
    header = {"descr": "<f4", "fortran_order": False, "shape": (375_000_000,)}
    text = repr(header).encode() + b" "
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open("x.npy", "w", force_zip64=True) as member,
    ):
        member.write(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text)
        zeros = bytes(1 << 24)
        for _ in range(375_000_000 * 4 // len(zeros)):
            member.write(zeros)
    return path


def _npz_object(folder: Path) -> Path:
    path = folder / "npz-object-dtype.npz"
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", buffer.getvalue())
    return path


def _npz_not_zip(folder: Path) -> Path:
    path = folder / "npz-not-a-zip.npz"
    path.write_bytes(b"PK\x03\x04" + b"\xff" * 200)
    return path


def _inputs_file_bombs() -> list[Bomb]:
    return [
        _inputs_bomb("npz-declares-2e40", lambda f: _npz_header_bomb(f, "npz-declares-2e40", [2**40])),
        _inputs_bomb(
            "npz-declares-2e20-squared",
            lambda f: _npz_header_bomb(f, "npz-declares-2e20-squared", [2**20, 2**20]),
        ),
        _inputs_bomb("npz-declares-negative", lambda f: _npz_header_bomb(f, "npz-declares-negative", [-4])),
        _inputs_bomb("npz-unknown-dtype", lambda f: _npz_header_bomb(f, "npz-unknown-dtype", [4], "<V7")),
        _inputs_bomb("npz-zip-bomb", _npz_zip_bomb),
        _inputs_bomb("npz-object-dtype", _npz_object),
        _inputs_bomb("npz-not-a-zip", _npz_not_zip),
    ]


def _bad_name(where: str) -> onnx.ModelProto:
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], [_float("x", [1])], [_float("y", [1])]
    )
    bad = b"\xff\xfe\xc3(bad"
    raw = model.SerializeToString()
    target = {"node": b"relu", "value": b"x"}[where]
    # The name is a protobuf string field: the same length swapped in place keeps the framing.
    replacement = bad[: len(target)] if len(bad) >= len(target) else bad + b"_" * (len(target) - len(bad))
    return onnx.ModelProto.FromString(raw.replace(target, replacement))


def _string_initializer() -> onnx.ModelProto:
    labels = helper.make_tensor("labels", TensorProto.STRING, [2], [b"cat", b"dog"])
    nodes = [helper.make_node("Identity", ["labels"], ["names"]), helper.make_node("Relu", ["x"], ["y"])]
    return _model(
        nodes,
        [_float("x", [1])],
        [_float("y", [1]), helper.make_tensor_value_info("names", TensorProto.STRING, [2])],
        [labels],
    )


def _malformed_bombs() -> list[Bomb]:
    bombs = [
        Bomb("string-initializer", "malformed", _saved(_string_initializer(), "string-initializer")),
        Bomb("invalid-utf8-node-name", "malformed", _saved(_bad_name("node"), "invalid-utf8-node-name")),
        Bomb("invalid-utf8-value-name", "malformed", _saved(_bad_name("value"), "invalid-utf8-value-name")),
    ]
    cyclic = _model(
        [
            helper.make_node("Add", ["x", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Identity", ["a"], ["y"]),
        ],
        [_float("x", [1])],
        [_float("y", [1])],
    )
    bombs.append(Bomb("cyclic-graph", "malformed", _saved(cyclic, "cyclic-graph")))
    huge_opset = _model(
        [helper.make_node("Relu", ["x"], ["y"])], [_float("x", [1])], [_float("y", [1])], opset=10**9
    )
    bombs.append(Bomb("opset-1e9", "malformed", _saved(huge_opset, "opset-1e9")))
    attribute = _model(
        [helper.make_node("Transpose", ["x"], ["y"], perm=list(range(200_000)))],
        [_float("x", [1])],
        [_float("y", [1])],
    )
    bombs.append(Bomb("transpose-perm-200000", "malformed", _saved(attribute, "transpose-perm-200000")))
    for name in ("output-under-proc", "output-under-a-file"):  # output_for gives their places
        model = _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", [1])], [_float("y", [1])])
        bombs.append(Bomb(name, "output-path", _saved(model, name), ("legalize", "build")))
    return bombs


def all_bombs() -> list[Bomb]:
    return [
        *_memory_bombs(),
        *_time_bombs(),
        *_declared_bombs(),
        *_inputs_file_bombs(),
        *_malformed_bombs(),
        *device_import_bombs(),
    ]


def output_for(bomb: Bomb, folder: Path, command: str) -> Path:
    """Where the command writes: an output path bomb's own impossible place, else in `folder`."""
    if bomb.name == "output-under-proc":
        return Path("/proc/deploycc-bomb/out")
    if bomb.name == "output-under-a-file":
        blocker = folder / "a-file"
        blocker.write_text("not a folder")
        return blocker / "out"
    return folder / f"{bomb.name}.{command}.out"


def argv_for(bomb: Bomb, path: Path, command: str, folder: Path, cli: tuple[str, ...]) -> list[str]:
    """The command line a user types for `command` on the bomb at `path` (`cli`: how deploycc is
    started), its outputs in `folder`."""
    if command == "device-import":
        return [*cli, "device", "import", str(outdir_of(path)), str(path)]
    out = output_for(bomb, folder, command)
    extra = ["--inputs", str(inputs_file(path))] if inputs_file(path) else []
    if command == "check":
        return [*cli, "check", str(path), "--target", "ort-cpu", "--target", "jetson-nano", *extra]
    if command == "legalize":
        return [*cli, "legalize", str(path), "--target", "jetson-nano", "-o", str(out) + ".onnx", *extra]
    return [*cli, "build", str(path), "--target", "ort-cpu", "-o", str(out), *extra]


# ---- device import: the board's files are input like any other --------------------------------


def _result_edit(name: str, edit: Callable[[dict], object]) -> Bomb:
    """A copy of a build that ran on the board whose result.json is edited by `edit` (which
    returns the JSON value to write: the edited dict, or a string written as it is). The path
    returned is the result file; its build is `outdir_of` it."""

    def write(folder: Path) -> Path:
        from tests.hostile.device_result import copy_of_board_build, honest_result

        outdir = copy_of_board_build(folder, name)
        value = edit(honest_result(outdir))
        path = outdir / "bundle" / "result.json"
        path.write_text(value if isinstance(value, str) else json.dumps(value))
        return path

    return Bomb(name, "device-import", write, ("device-import",))


def _bundle_edit(name: str, edit: Callable[[Path], None]) -> Bomb:
    """A copy of a board build whose bundle folder, as run_on_device.sh (trtexec) leaves it, is
    edited by `edit`: the path returned is the bundle folder."""

    def write(folder: Path) -> Path:
        from tests.hostile.device_result import copy_of_board_build

        bundle = copy_of_board_build(folder, name) / "bundle"
        (bundle / "result.json").unlink()
        (bundle / "trtexec-output.json").write_text(
            json.dumps([{"name": "y", "dimensions": "1x2", "values": [0.0, 0.0]}])
        )
        edit(bundle)
        return bundle

    return Bomb(name, "device-import", write, ("device-import",))


def outdir_of(result: Path) -> Path:
    return result.parent if result.is_dir() else result.parents[1]


def _set(path: str, value: object) -> Callable[[dict], dict]:
    def edit(result: dict) -> dict:
        keys = path.split(".")
        place = result
        for key in keys[:-1]:
            place = place.setdefault(key, {}) if isinstance(place.get(key), dict) else place
        if value is KeyError:
            place.pop(keys[-1], None)
        else:
            place[keys[-1]] = value
        return result

    return edit


def _outputs(**fields: object) -> Callable[[dict], dict]:
    """Every output row of a result gets `fields`."""

    def edit(result: dict) -> dict:
        for row in result.get("outputs") or []:
            row.update(fields)
        return result

    return edit


def _index_edit(**fields: object) -> Callable[[Path], None]:
    """The bundle's reference index: its first output entry gets `fields`."""

    def edit(bundle: Path) -> None:
        path = bundle / "reference" / "reference.json"
        index = json.loads(path.read_text())
        index["outputs"][0].update(fields)
        path.write_text(json.dumps(index))

    return edit


def _trtexec_output(text: str) -> Callable[[Path], None]:
    return lambda bundle: (bundle / "trtexec-output.json").write_text(text)


def device_import_bombs() -> list[Bomb]:
    return [
        _result_edit("result-nested-100000", lambda result: "[" * 100_000 + "]" * 100_000),
        _result_edit("result-nested-dict-5000", lambda result: '{"a": ' * 5000 + "1" + "}" * 5000),
        _result_edit("result-not-json", lambda result: '{"schema": 1, '),
        _result_edit("result-a-list", lambda result: [1, 2, 3]),
        _result_edit("result-latency-a-string", _set("latency.p90_ms", "fast")),
        _result_edit("result-latency-a-list", _set("latency", [1, 2])),
        _result_edit("result-latency-missing-p90", _set("latency.p90_ms", KeyError)),
        _result_edit("result-tolerances-missing", _set("tolerances", KeyError)),
        _result_edit("result-outputs-not-a-list", _set("outputs", "all good")),
        _result_edit("result-outputs-error-a-string", _outputs(max_abs_error="tiny")),
        _result_edit("result-status-unknown", _set("status", "verified-on-device-honest")),
        _bundle_edit("bundle-without-model", lambda bundle: (bundle / "model.onnx").unlink()),
        _bundle_edit("trtexec-output-not-json", _trtexec_output("[{]")),
        _bundle_edit(
            "trtexec-output-strings",
            _trtexec_output(json.dumps([{"name": "y", "dimensions": "1x2", "values": ["a", "b"]}])),
        ),
        _bundle_edit(
            "trtexec-output-dims-lie",
            _trtexec_output(
                json.dumps([{"name": "y", "dimensions": "1099511627776x2", "values": [0.0, 0.0]}])
            ),
        ),
        _bundle_edit("reference-file-escapes", _index_edit(file="../../../../../../etc/hostname")),
        _bundle_edit("reference-shape-lies", _index_edit(shape=[1000, 1000])),
        _bundle_edit("reference-shape-2e40", _index_edit(shape=[2**40])),
        _bundle_edit("reference-object-dtype", _index_edit(dtype="object")),
    ]
