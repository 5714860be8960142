"""Does "verified" hold for every torch module in modules.py? Each case is built as a user types
it (`deploycc build benchmarks/torch_trust/modules.py:NAME --target T`) for each target, and every
build that says it succeeded is run on ONNX Runtime CPU (the engine where it is built here, the
legalized model where the engine is built on the device) against torch on inputs the example could
not show wrong: the example negated, scaled by 10 and shifted by -0.5, and one larger along each
dim the artifact keeps dynamic. The external-data cases are also exported by torch's dynamo
exporter with their weights in model.onnx.data and built from that file.

    python benchmarks/torch_trust/run.py [--targets ort-cpu,jetson-xavier] [--out /tmp/trust]

Writes benchmarks/torch_trust/results.{json,md}: per case and target the status, the export's
failure class, and "silently wrong" where a success differs from torch. The goal is 0 of those,
and every "refuse" case refused with its class (or built only with --accept-trace-warnings).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from rich.progress import Progress

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import modules  # noqa: E402

SUCCESS = {"verified", "pending-on-device", "bundled", "needs-inputs"}


def build(spec: str, target: str, out: Path, *extra: str) -> dict:
    command = [sys.executable, "-m", "deploycc.cli", "build", spec, "--target", target, "-o", str(out),
               "--force", "--no-bench", *extra]
    out.parent.mkdir(parents=True, exist_ok=True)  # run from there: `python -m` puts its folder first
    done = subprocess.run(command, capture_output=True, text=True, cwd=out.parent)
    try:
        report = json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        return {"status": "no-report", "exit": done.returncode, "line": (done.stderr or done.stdout)[-300:]}
    export = report.get("export") or {}
    kinds = [a["failure"]["kind"] for a in export.get("attempts", []) if a.get("failure")]
    return {"status": report["status"], "exit": done.returncode, "classes": kinds,
            "accepted": any(a.get("guards_accepted") for a in export.get("attempts", []))}


def variants(feeds: dict[str, np.ndarray]) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Inputs the example could not show wrong; integer inputs (token ids) are left as they are."""
    def moved(change):
        return {k: (change(v).astype(v.dtype) if v.dtype.kind == "f" else v) for k, v in feeds.items()}
    return [("negated", moved(lambda v: -v)), ("x10", moved(lambda v: v * 10)),
            ("shifted", moved(lambda v: v - 0.5))]


def larger(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The feeds one larger along every dim the model leaves dynamic (cyclic), or None."""
    grown, any_dynamic = {}, False
    for value in session.get_inputs():
        array = feeds[value.name]
        for axis, dim in enumerate(value.shape):
            if not isinstance(dim, int):
                any_dynamic = True
                array = np.take(array, np.arange(array.shape[axis] + 1) % array.shape[axis], axis=axis)
        grown[value.name] = array
    return grown if any_dynamic else None


def check(name: str, folder: Path) -> list[str]:
    """The inputs on which the artifact in `folder` differs from torch."""
    from deploycc.frontend.proof import torch_outputs

    module, _ = modules.FACTORIES[name]()
    model = folder / ("model.ort.onnx" if (folder / "model.ort.onnx").is_file() else "model.legalized.onnx")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    example = dict(np.load(folder / "verify-inputs.npz"))
    example = {k: v for k, v in example.items() if k in {i.name for i in session.get_inputs()}}
    cases = variants(example)
    grown = larger(session, example)
    if grown is not None:
        cases += [("larger", grown), *[(f"larger {label}", feeds) for label, feeds in variants(grown)[:1]]]
    wrong = []
    names = [value.name for value in session.get_inputs()]
    for label, feeds in cases:
        tensors = tuple(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names)
        try:
            expected = torch_outputs(module, tensors)
        except Exception:  # the module itself refuses these inputs (assert, sqrt of negatives)
            continue
        actual = session.run(None, feeds)
        for want, got in zip(expected, actual, strict=True):
            same_nan = np.isnan(want) == np.isnan(got) if want.dtype.kind == "f" else True
            if want.shape != got.shape or not np.all(same_nan) or not np.allclose(
                    np.nan_to_num(got), np.nan_to_num(want), rtol=1e-3, atol=1e-4):
                wrong.append(label)
                break
    return wrong


def external_data_build(name: str, target: str, out: Path) -> dict:
    """The case exported by dynamo with its weights in model.onnx.data, built from that file."""
    module, inputs = modules.FACTORIES[name]()
    source = out / "export"
    source.mkdir(parents=True, exist_ok=True)
    program = torch.onnx.export(module, inputs, dynamo=True, input_names=["x"], verify=False, report=False,
                                dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
    program.save(str(source / "model.onnx"), external_data=True)
    result = build(str(source / "model.onnx"), target, out / "build")
    result["external_data"] = (source / "model.onnx.data").is_file()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default="ort-cpu,jetson-xavier")
    parser.add_argument("--out", default="/tmp/torch-trust")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--name", default="results",
                        help="results file stem (another deploycc: PYTHONPATH=/its/checkout, e.g. "
                             "`git worktree add /tmp/before REV`)")
    args = parser.parse_args()
    out, targets = Path(args.out), args.targets.split(",")
    names = [n for n in modules.FACTORIES if not args.only or n in args.only.split(",")]
    rows = []
    started = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task("torch trust", total=len(names) * len(targets))
        for name in names:
            for target in targets:
                progress.update(task, description=f"{name} on {target}")
                folder = out / f"{name}.{target}"
                row = {"case": name, "target": target, "expected": modules.CASES[name],
                       **build(f"{HERE / 'modules.py'}:{name}", target, folder)}
                row["wrong_on"] = check(name, folder) if row["status"] in SUCCESS else []
                if name in modules.EXTERNAL_DATA:
                    row["onnx_external_data"] = external_data_build(name, target,
                                                                    out / f"{name}.{target}.onnx")
                rows.append(row)
                progress.advance(task)
    silently_wrong = [r for r in rows if r["wrong_on"]]
    dependent = [r for r in rows if r["expected"] == "refuse"]
    refused = [r for r in dependent if r["status"] not in SUCCESS and r.get("classes")]
    # dynamo may follow what the tracer cannot (.item() as a value of the graph): built, and right
    # on every input tried
    followed = [r for r in dependent if r["status"] in SUCCESS and not r["wrong_on"]]
    plain = [r for r in rows if r["expected"] == "build"]
    built_right = [r for r in plain if r["status"] in SUCCESS and not r["wrong_on"]]
    summary = {"cases": len(names), "targets": targets, "builds": len(rows),
               "silently_wrong": len(silently_wrong),
               "data_dependent_builds": len(dependent), "refused_with_class": len(refused),
               "built_and_right_on_other_inputs": len(followed),
               "other_builds_succeeded": f"{len(built_right)}/{len(plain)}",
               "internal_errors": sum(r["exit"] == 3 for r in rows),
               "seconds": round(time.perf_counter() - started, 1)}
    (HERE / f"{args.name}.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    lines = ["# torch trust", "", f"`python benchmarks/torch_trust/run.py --name {args.name}` "
             + json.dumps(summary), "",
             "| case | expected | target | status | exit | export classes | wrong on | external-data ONNX |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        onnx_build = r.get("onnx_external_data")
        extra = f"{onnx_build['status']} (data file: {onnx_build['external_data']})" if onnx_build else "-"
        lines.append(f"| {r['case']} | {r['expected']} | {r['target']} | {r['status']} | {r['exit']} | "
                     f"{', '.join(r.get('classes', [])) or '-'} | {', '.join(r['wrong_on']) or '-'} | "
                     f"{extra} |")
    (HERE / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
