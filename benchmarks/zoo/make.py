"""Make the zoo: every model of catalog.py exported to ONNX as its users export it (both torch
exporters where the catalog asks, opsets 11-20, dynamic batch and H/W or sequence where natural),
with hints (a static shape per input at batch 1), checked on ONNX Runtime against torch.

    .venv-bench/bin/python benchmarks/zoo/make.py [--family timm,...] [--limit N] [--out DIR]

Nothing is downloaded but the PyPI packages of `.venv-bench` (random weights, from code or a small
config). Models go to benchmarks/zoo/models/ (ignored by git; `--out` elsewhere), one file per
export, NAME_ts13.onnx or NAME_dynamo18.onnx, with NAME_....hints.json; a model present is kept
(a rerun resumes, checking it again), `--force` makes it again. One worker process exports model
after model; a model that hangs past --timeout or crashes the worker is recorded and the next worker goes on.
zoo.txt lists every ONNX file made; manifest.json has each export's family, group, exporter,
opset, nodes, size, ORT result and torch-vs-ORT difference, and every failure with its cause.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from catalog import FAMILIES, NOT_MADE, TIMM_LEFT_OUT, catalog, lookup  # noqa: E402
from zoo_model import EXPORT_BATCH, ZooModel  # noqa: E402

MAX_PARAMETERS = 150e6  # beyond this a model is listed, not made (disk and time on two cores)


def file_name(model: ZooModel, exporter: str, opset: int) -> str:
    return f"{model.name}_{'ts' if exporter == 'torchscript' else exporter}{opset}"


def export(model: ZooModel, module: Any, exporter: str, opset: int, path: Path) -> str:
    """One export, as a user writes it; returns how the axes came out."""
    if model.convert is not None:  # not a torch module: its library's own converter
        return model.convert(module, opset, path)
    import torch

    args = model.inputs(EXPORT_BATCH if any(0 in axes for axes in model.dynamic.values()) else 1)
    if exporter == "dynamo":
        batch_only = {name: {0: "batch"} for name, axes in model.dynamic.items() if 0 in axes}
        for dynamic in (model.dynamic, batch_only) if batch_only != model.dynamic else (model.dynamic,):
            dims: dict[str, Any] = {}
            shapes = {
                name: {
                    axis: dims.setdefault(label, torch.export.Dim(label, max=4096))
                    if label in ("batch", "sequence", "decoder_sequence", "samples")
                    else torch.export.Dim.AUTO
                    for axis, label in axes.items()
                }
                for name, axes in dynamic.items()
            }
            try:
                program = torch.onnx.export(
                    module,
                    args,
                    dynamo=True,
                    opset_version=opset,
                    input_names=model.names,
                    output_names=model.outputs,
                    dynamic_shapes=tuple(shapes.get(n) for n in model.names),
                )
            except Exception:
                if dynamic is batch_only or batch_only == model.dynamic:
                    raise
                continue  # H/W with constraints torch.export cannot keep: the batch alone, as users fall back
            assert program is not None
            program.save(str(path), external_data=False)
            return f"dynamic {dynamic}"
    if opset < 14:  # no ONNX translation of fused attention below 14: timm's own switch, as its users do
        for layer in module.modules():
            if getattr(layer, "fused_attn", None) is True:
                layer.fused_attn = False
    axes = {name: dict(axes) for name, axes in model.dynamic.items()}
    if any(0 in a for a in axes.values()):
        axes.update({output: {0: "batch"} for output in model.outputs})
    torch.onnx.export(
        module,
        args,
        str(path),
        dynamo=False,
        opset_version=opset,
        input_names=model.names,
        output_names=model.outputs,
        dynamic_axes=axes or None,
    )
    return f"dynamic {model.dynamic}"


def graph_batch(path: Path, model: ZooModel) -> int:
    """1, or the batch the exporter wrote as a constant where it was meant to stay dynamic (torch
    sometimes specialises the traced batch): the hints and the check take the graph's."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name in model.dynamic and 0 in model.dynamic[value.name] and dims and dims[0].dim_value > 1:
            return dims[0].dim_value
    return 1


def check(model: ZooModel, module: Any, path: Path, batch: int) -> dict[str, Any]:
    """ONNX Runtime on the example inputs against torch: runs, and the largest difference."""
    import numpy as np
    import onnxruntime as ort
    import torch

    inputs = model.inputs(batch)
    if model.predict is not None:
        expected = [torch.from_numpy(np.asarray(array)) for array in model.predict(module, inputs)]
    else:
        with torch.no_grad():
            expected = module(*inputs)
        expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        feeds = {n: np.asarray(t) for n, t in zip(model.names, inputs, strict=True) if n in wanted}
        actual = session.run(None, feeds)
    except Exception as error:
        return {"ort": f"error: {type(error).__name__}: {' '.join(str(error).split())[:300]}"}
    worst = 0.0
    for want, got in zip(expected, actual, strict=False):
        want = want.detach().numpy()
        if isinstance(got, list):  # ZipMap's rows of {class: probability}
            got = np.asarray([[row[key] for key in sorted(row)] for row in got], np.float32)
        if want.shape != got.shape:
            return {"ort": "ok", "torch_vs_ort": f"shape {list(got.shape)} vs torch {list(want.shape)}"}
        if want.size and np.issubdtype(want.dtype, np.floating):
            scale = float(np.abs(want).max()) or 1.0
            worst = max(worst, float(np.abs(want - got.astype(want.dtype)).max()) / scale)
    return {"ort": "ok", "torch_vs_ort": round(worst, 8)}


def _still_current(model: ZooModel, module: Any, path: Path, batch: int) -> bool:
    result = check(model, module, path, batch)
    difference = result.get("torch_vs_ort")
    return result.get("ort") == "ok" and isinstance(difference, float) and difference <= 1e-3


def work(names: list[str], out: Path, force: bool) -> None:
    """The worker: each model's exports in turn, one JSON line per model."""
    import onnx
    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    warnings.simplefilter("ignore")
    for name in names:
        model = lookup(name)
        assert model is not None
        rows: list[dict[str, Any]] = []
        print(f"START {name}", flush=True)
        started = time.perf_counter()
        try:
            torch.manual_seed(0)
            module = model.make()
            parameters = model.count(module) if model.count else sum(p.numel() for p in module.parameters())
        except Exception as error:
            rows.append({"file": None, "failure": f"build: {type(error).__name__}: {_line(error)}"})
            print("DONE " + json.dumps({"name": name, "rows": rows}), flush=True)
            continue
        if parameters > MAX_PARAMETERS:
            rows.append({"file": None, "failure": f"left out: {parameters / 1e6:.0f} M parameters"})
            print("DONE " + json.dumps({"name": name, "rows": rows}), flush=True)
            continue
        for exporter, opset in model.exports:
            stem = file_name(model, exporter, opset)
            path = out / f"{stem}.onnx"
            row: dict[str, Any] = {
                "file": path.name,
                "exporter": exporter,
                "opset": opset,
                "parameters": parameters,
            }
            hints_file = out / f"{stem}.hints.json"
            # A file made before is kept while it still computes what the catalog's module does
            # (the catalog's weights change with its code: the file is then made again).
            if path.exists() and hints_file.exists() and not force and \
                    _still_current(model, module, path, graph_batch(path, model)):
                row["axes"] = json.loads(hints_file.read_text())["source"].rpartition(", ")[2]
            else:
                partial = out / f"{stem}.onnx.partial"
                begun = time.perf_counter()
                try:
                    with _quiet(out / "logs" / f"{stem}.log"):
                        row["axes"] = export(model, module, exporter, opset, partial)
                    partial.replace(path)
                except Exception as error:
                    partial.unlink(missing_ok=True)
                    row.update(file=None, failure=f"export: {type(error).__name__}: {_line(error)}")
                    rows.append(row)
                    continue
                row["export_seconds"] = round(time.perf_counter() - begun, 1)
            proto = onnx.load(str(path), load_external_data=False)
            row.update(
                nodes=len(proto.graph.node),
                size=path.stat().st_size,
                opset_written=next(
                    (i.version for i in proto.opset_import if i.domain in ("", "ai.onnx")), None
                ),
            )
            batch = graph_batch(path, model)
            if batch != 1:
                row["note"] = f"the exporter fixed the batch at {batch}"
            row.update(check(model, module, path, batch))
            hints = {
                "family": model.family,
                "group": model.group,
                "exporter": exporter,  # the audit page groups by family and exporter
                "source": f"{model.about}; {exporter} exporter, opset {opset}, {row['axes']}",
                "shapes": {n: list(t.shape) for n, t in zip(model.names, model.inputs(batch), strict=True)},
            }
            (out / f"{stem}.hints.json").write_text(json.dumps(hints, indent=1) + "\n")
            rows.append(row)
        print(
            "DONE "
            + json.dumps({"name": name, "rows": rows, "seconds": round(time.perf_counter() - started, 1)}),
            flush=True,
        )


def _line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


@contextlib.contextmanager
def _quiet(log: Path) -> Any:
    from deploycc.io.files import descriptors_to

    log.parent.mkdir(exist_ok=True)
    with log.open("w") as handle, descriptors_to(handle):
        yield
    log.unlink(missing_ok=True)


def _pump(child: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """The worker's lines into a queue the parent waits on with a timeout; None at its end."""
    for line in child.stdout or []:
        lines.put(line)
    lines.put(None)


def run(names: list[str], out: Path, force: bool, timeout: float,
        record: Callable[[dict[str, Any]], None]) -> None:
    """Workers over `names`, each restarted after a model that hangs or kills it; `record(result)`
    as each model ends (the manifest is written as the zoo is made: an interrupted run loses none)."""
    from rich.progress import Progress

    ended: set[str] = set()

    def finish(result: dict[str, Any]) -> None:
        ended.add(result["name"])
        record(result)
        progress.advance(task)

    def failed(name: str, why: str) -> None:
        finish({"name": name, "rows": [{"file": None, "failure": why}]})

    todo = list(names)
    with Progress() as progress:
        task = progress.add_task("zoo", total=len(names))
        while todo:
            command = [sys.executable, __file__, "--worker", ",".join(todo), "--out", str(out),
                       *(["--force"] if force else [])]
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            lines: queue.Queue[str | None] = queue.Queue()
            threading.Thread(target=_pump, args=(child, lines), daemon=True).start()
            current = None
            while True:
                try:
                    line = lines.get(timeout=timeout)
                except queue.Empty:
                    child.kill()
                    if current:
                        failed(current, f"timeout: no result within {timeout:.0f} s")
                        current = None
                    break
                if line is None:
                    break
                if line.startswith("START "):
                    current = line.split()[1]
                    progress.update(task, description=current)
                elif line.startswith("DONE "):
                    finish(json.loads(line[5:]))
                    current = None
            child.wait()
            if current:  # the worker died with this model
                failed(current, f"crash: the worker ended with exit {child.returncode}")
            todo = [name for name in todo if name not in ended]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--family", default=",".join(FAMILIES))
    parser.add_argument("--limit", type=int, default=0, help="the first N models of each family")
    parser.add_argument("--names", default="", help="comma-separated model names")
    parser.add_argument("--out", type=Path, default=HERE / "models")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        work(args.worker.split(","), args.out, args.force)
        return 0
    families = tuple(f for f in args.family.split(",") if f)
    every = catalog(families)
    per_family = [[n for n, m in every.items() if m.family == family][: args.limit or None]
                  for family in families]
    # the families in turn, so that a zoo made in part already holds each of them
    names = [n for n in args.names.split(",") if n] or [
        name for row in itertools.zip_longest(*per_family) for name in row if name]
    unknown = [n for n in names if n not in every]
    if unknown:  # a worker would fail on each, and the next worker again
        print(f"not in the catalog: {', '.join(unknown)} (names carry their family: timm_, hf_ or tv_)")
        return 2
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"models": {}}
    manifest["not_made"] = {**NOT_MADE, **{f"timm {k}": v for k, v in TIMM_LEFT_OUT.items()}}
    started = time.perf_counter()

    def record(result: dict[str, Any]) -> None:
        model = every[result["name"]]
        rows = result["rows"]
        manifest["models"][model.name] = {"family": model.family, "group": model.group, "about": model.about,
                                          "exports": rows, "seconds": result.get("seconds")}
        partial = manifest_path.with_suffix(".partial")
        partial.write_text(json.dumps(manifest, indent=1) + "\n")
        partial.replace(manifest_path)

    run(names, args.out, args.force, args.timeout, record)
    files = sorted(
        row["file"]
        for entry in manifest["models"].values()
        for row in entry["exports"]
        if row.get("file") and (args.out / row["file"]).exists()
    )
    (args.out / "zoo.txt").write_text("".join(f"{f}\n" for f in files))
    failed = [
        (n, r["failure"]) for n, e in manifest["models"].items() for r in e["exports"] if r.get("failure")
    ]
    print(
        f"{len(files)} ONNX files from {len(manifest['models'])} models; {len(failed)} exports failed; "
        f"{time.perf_counter() - started:.0f} s"
    )
    for name, why in failed:
        print(f"  x {name}: {why[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
