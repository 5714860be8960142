"""The PyTorch front end against the path a user takes today, side by side in one run:

    front end   deploycc.build(module, example_inputs, target=T)   (the target's exporters, its opset
                ceiling, the batch as its shape policy wants it, every export proven against torch)
    today       torch.onnx.export(module, example_inputs, "m.onnx") with its defaults, then
                deploycc build m.onnx --target T

on torchvision's builders (random weights, nothing downloaded), or with --zoo on the zoo's torch
models (benchmarks/zoo/catalog.py: timm, transformers, torchvision, ultralytics, segmentation-models-
pytorch; the first --limit of each family in turn), each model in a child process so that a crash
costs one model. Writes benchmarks/torch-frontend[-zoo]/results.jsonl (resumable: models already
there are skipped) and summary.md.

    PYTHONPATH=. .venv-bench/bin/python benchmarks/torch_frontend.py --targets ort-cpu,jetson-xavier
    PYTHONPATH=. .venv-bench/bin/python benchmarks/torch_frontend.py --zoo --limit 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "torch-frontend"
ZOO_OUT = HERE / "torch-frontend-zoo"
TARGETS = ("ort-cpu", "openvino-cpu", "jetson-xavier", "jetson-nano", "jetson-orin", "gpu-trt10")
SUCCEEDED = ("verified", "pending-on-device")
# Too large to export on a 2-core machine in minutes, or with inputs of their own (detection takes
# lists of images, video clips, optical flow image pairs): left to the zoo.
SKIPPED_PREFIXES = ("vit_h_", "regnet_y_128gf", "regnet_y_32gf", "regnet_x_32gf", "vit_l_", "swin_v2_b",
                    "fasterrcnn", "fcos", "retinanet", "ssd", "keypointrcnn", "maskrcnn", "raft", "r3d",
                    "mc3", "r2plus1d", "s3d", "mvit", "swin3d", "quantized")
INPUT_SIZE = {"inception_v3": 299}


def model_names() -> list[str]:
    import torchvision

    names = torchvision.models.list_models()
    return sorted(n for n in names if not n.startswith(SKIPPED_PREFIXES))


def zoo_names(limit: int) -> list[str]:
    """The zoo's torch models, the first `limit` of each family taken in turn (as its audit does)."""
    from itertools import zip_longest

    sys.path.insert(0, str(HERE / "zoo"))
    from catalog import catalog

    per_family: dict[str, list[str]] = {}
    for name, model in catalog().items():
        per_family.setdefault(model.family, []).append(name)
    chosen = [names[:limit] if limit else names for names in per_family.values()]
    return [name for rank in zip_longest(*chosen) for name in rank if name is not None]


def zoo_module(name: str) -> tuple:
    """A zoo model's module and example inputs at batch 1, the same weights as its audit's."""
    import torch

    sys.path.insert(0, str(HERE / "zoo"))
    from catalog import lookup

    model = lookup(name)
    if model is None:
        raise SystemExit(f"no zoo model {name!r}")
    torch.manual_seed(0)
    return model.make(), model.inputs(1)


def zoo_family(name: str) -> str:
    from catalog import lookup

    model = lookup(name)
    return model.family if model else "?"


def torchvision_module(name: str) -> tuple:
    import torch
    import torchvision

    torch.manual_seed(0)
    try:  # segmentation builders fetch their backbone's weights unless told not to
        module = torchvision.models.get_model(name, weights=None, weights_backbone=None).eval()
    except TypeError:
        module = torchvision.models.get_model(name, weights=None).eval()
    size = INPUT_SIZE.get(name, 224)
    example = (torch.randn(1, 3, size, size),)
    for child in module.modules():  # ViT's head starts at zero: logits that say nothing
        if isinstance(child, torch.nn.Linear) and not child.weight.detach().any():
            torch.nn.init.normal_(child.weight, std=0.02)
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules()):
        # Random weights with BatchNorm's initial statistics leave MobileNet's and EfficientNet's
        # logits within 1e-6 of zero: no signal to verify on (both paths say "needs inputs").
        # A few batches in train mode give the statistics of random images, and the logits a spread.
        module.train()
        with torch.no_grad():
            for _ in range(3):
                module(torch.randn(4, 3, size, size))
        module.eval()
    return module, example


def run_one(name: str, targets: list[str], exporter: str | None = None, today: bool = True,
            zoo: bool = False) -> list[dict]:
    """Both paths for one model on every target (in this process); with `exporter`, the front end
    with that exporter alone (what decides each target's order), and `today` off."""
    import torch

    from deploycc import api
    from deploycc.errors import DeployccError
    from deploycc.options import BuildOptions

    module, example = zoo_module(name) if zoo else torchvision_module(name)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        started = time.perf_counter()
        exported_today = work / "today.onnx"
        today_error = ""
        try:
            if today:
                torch.onnx.export(module, example, str(exported_today))  # torch's defaults
        except Exception as error:  # the user's path ends here
            today_error = f"{type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"
        today_export_s = time.perf_counter() - started
        for target in targets:
            row: dict = {"model": name, "target": target}
            if zoo:
                row["family"] = zoo_family(name)
            started = time.perf_counter()
            try:  # at the target's default precision: this measures conversion, not the precision search
                report = api.build(module, example, target=target, outdir=work / f"fe.{target}",
                                   options=BuildOptions(bench=False, choose_precision=False),
                                   exporters=[exporter] if exporter else None)
                export = report.export
                row["frontend"] = {
                    "status": str(report.status), "stage": str(report.stage), "summary": report.summary[:300],
                    "chosen": export.chosen if export else None,
                    "attempts": [{"exporter": a.exporter, "opset": a.opset_written, "nodes": a.nodes,
                                  "failure": a.failure.kind if a.failure else None,
                                  "outcome": a.outcome, "dynamic": bool(a.dynamic)}
                                 for a in (export.attempts if export else [])],
                    "final": (export.final.passed if export and export.final else None),
                    "export_s": round(export.seconds, 2) if export else None,
                    "nodes_after": report.legalize.nodes.get("after") if report.legalize else None,
                }
            except DeployccError as error:
                row["frontend"] = {"status": "error", "stage": "export", "summary": str(error)[:300]}
            except Exception as error:  # a bug: recorded with the model, and the run goes on
                import traceback

                traceback.print_exc()
                row["frontend"] = {"status": "internal-error", "stage": "?",
                                   "summary": f"{type(error).__name__}: {error}"[:300]}
            row["frontend"]["seconds"] = round(time.perf_counter() - started, 2)
            if not today:
                pass
            elif today_error:
                row["today"] = {"status": "export-failed", "summary": today_error,
                                "seconds": round(today_export_s, 2)}
            else:
                started = time.perf_counter()
                try:
                    built = api.build(exported_today, target, work / f"today.{target}",
                                      BuildOptions(bench=False, choose_precision=False))
                    after = built.legalize.nodes.get("after") if built.legalize else None
                    row["today"] = {"status": str(built.status), "stage": str(built.stage),
                                    "summary": built.summary[:300], "nodes_after": after}
                except DeployccError as error:
                    row["today"] = {"status": "error", "summary": str(error)[:300]}
                except Exception as error:
                    row["today"] = {"status": "internal-error",
                                    "summary": f"{type(error).__name__}: {error}"[:300]}
                row["today"]["seconds"] = round(time.perf_counter() - started + today_export_s, 2)
            print("ROW " + json.dumps(row), flush=True)
            rows.append(row)
    return rows


def summarize(rows: list[dict], targets: list[str], zoo: bool = False) -> str:
    from deploycc.frontend.failures import without_colour

    source = "zoo torch models (benchmarks/zoo/catalog.py)" if zoo else "torchvision models"
    lines = ["# The PyTorch front end against torch.onnx.export's defaults then deploycc build", "",
             f"{len({r['model'] for r in rows})} {source} (random weights), one child process per "
             "model. Success = verified (CPU targets) or legalized, verified on ORT and bundled "
             "(TensorRT targets, pending on the device).", "",
             "| target | front end | today | front end worse | second exporter needed | chosen dynamo / "
             "torchscript | median s front end / today |", "|---|---|---|---|---|---|---|"]
    for target in targets:
        cells = [r for r in rows if r["target"] == target]
        if not cells:
            continue
        ok = [r for r in cells if r["frontend"]["status"] in SUCCEEDED]
        today = [r for r in cells if r.get("today", {}).get("status") in SUCCEEDED]
        worse = [r["model"] for r in cells if r["frontend"]["status"] not in SUCCEEDED
                 and r.get("today", {}).get("status") in SUCCEEDED]
        second = sum(1 for r in cells if len(r["frontend"].get("attempts", [])) > 1)
        chosen = [r["frontend"].get("chosen") for r in ok]
        fe_s = statistics.median(r["frontend"]["seconds"] for r in cells)
        today_s = statistics.median(r.get("today", {}).get("seconds", 0.0) for r in cells)
        lines.append(f"| {target} | {len(ok)}/{len(cells)} | {len(today)}/{len(cells)} | "
                     f"{len(worse)}{' (' + ', '.join(worse) + ')' if worse else ''} | {second} | "
                     f"{chosen.count('dynamo')} / {chosen.count('torchscript')} | "
                     f"{fe_s:.1f} / {today_s:.1f} |")
    families = sorted({r["family"] for r in rows if "family" in r})
    if families:
        lines += ["", "By family (front end / today, successes over cells on all targets):", "",
                  "| family | models | front end | today | front end worse |", "|---|---|---|---|---|"]
        for family in families:
            cells = [r for r in rows if r.get("family") == family and r["target"] in targets]
            ok = sum(r["frontend"]["status"] in SUCCEEDED for r in cells)
            today = sum(r.get("today", {}).get("status") in SUCCEEDED for r in cells)
            worse = sum(r["frontend"]["status"] not in SUCCEEDED
                        and r.get("today", {}).get("status") in SUCCEEDED for r in cells)
            lines.append(f"| {family} | {len({r['model'] for r in cells})} | {ok}/{len(cells)} | "
                         f"{today}/{len(cells)} | {worse} |")
    lost = [r for r in rows if r["frontend"]["status"] in SUCCEEDED
            and r.get("today", {}).get("status") not in SUCCEEDED]
    if lost:
        lines += ["", "## Where today's path fails and the front end deploys", ""]
        grouped: dict[tuple[str, str, str], list[str]] = {}
        for r in lost:  # one line per model and cause, its targets listed
            today = r.get("today", {})
            cause = without_colour(today.get("summary", "")).split(". ")[0][:200]
            grouped.setdefault((r["model"], str(today.get("status")), cause), []).append(r["target"])
        lines += [f"- {model} on {', '.join(where) if len(where) < len(targets) else 'every target'}: "
                  f"today {status}: {cause}" for (model, status, cause), where in grouped.items()]
    failures = [r for r in rows if r["frontend"]["status"] not in SUCCEEDED]
    if failures:
        lines += ["", "## Front-end failures", ""]
        lines += [f"- {r['model']} on {r['target']}: {r['frontend']['summary']}" for r in failures]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--models", default="", help="comma-separated torchvision names (default: all kept)")
    parser.add_argument("--limit", type=int, default=0, help="models (with --zoo: per family)")
    parser.add_argument("--zoo", action="store_true", help="the zoo's torch models instead of torchvision's")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per model, all targets")
    parser.add_argument("--out", type=Path, help=f"default {OUT.name}/, with --zoo {ZOO_OUT.name}/")
    parser.add_argument("--exporter", choices=["dynamo", "torchscript"],
                        help="the front end with this exporter alone, and not today's path (--out elsewhere)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    if args.one:
        run_one(args.one, targets, args.exporter, today=args.exporter is None, zoo=args.zoo)  # prints rows
        return
    args.out = args.out or (ZOO_OUT if args.zoo else OUT)
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    done = {(r["model"], r["target"]) for r in map(json.loads, results.read_text().splitlines())} \
        if results.exists() else set()
    names = [n for n in args.models.split(",") if n] or (zoo_names(args.limit) if args.zoo else model_names())
    names = names[:args.limit] if args.limit and not args.zoo else names
    from rich.progress import Progress

    with Progress() as progress:
        task = progress.add_task("models", total=len(names))
        for name in names:
            todo = [t for t in targets if (name, t) not in done]
            if todo:
                progress.update(task, description=name)
                try:
                    command = [sys.executable, __file__, "--one", name, "--targets", ",".join(todo),
                               *(["--exporter", args.exporter] if args.exporter else []),
                               *(["--zoo"] if args.zoo else [])]
                    child = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
                    rows = [json.loads(line[4:]) for line in child.stdout.splitlines()
                            if line.startswith("ROW ")]
                    if not rows:
                        tail = (child.stderr.strip().splitlines() or ["no output"])[-1][:200]
                        crashed = {"status": "crashed", "summary": tail, "seconds": 0.0}
                        rows = [{"model": name, "target": t, "frontend": crashed} for t in todo]
                except subprocess.TimeoutExpired:
                    timeout = {"status": "timeout", "summary": "timeout", "seconds": float(args.timeout)}
                    rows = [{"model": name, "target": t, "frontend": timeout} for t in todo]
                with results.open("a") as handle:
                    for row in rows:
                        handle.write(json.dumps(row) + "\n")
            progress.advance(task)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    (args.out / "summary.md").write_text(summarize(rows, targets, zoo=args.zoo))
    print((args.out / "summary.md").read_text())
    if args.zoo:  # its own block of RESULTS.md; the torchvision run's block carries hand-written findings
        sys.path.insert(0, str(HERE))
        from results_page import put_block

        begin, end = "<!-- torch-frontend-zoo:begin -->", "<!-- torch-frontend-zoo:end -->"
        body = summarize(rows, targets, zoo=True).replace(
            "# The PyTorch front end against torch.onnx.export's defaults then deploycc build",
            "## From PyTorch on the zoo: the front end against `torch.onnx.export`'s defaults then "
            "`deploycc build`", 1)
        made = (f"Made by `benchmarks/torch_frontend.py --zoo` ({time.strftime('%Y-%m-%d')}); raw data in "
                f"`{args.out.name}/results.jsonl`.\n\n")
        put_block(f"{begin}\n{body.replace(chr(10) * 2, chr(10) * 2 + made, 1)}{end}", begin, end)


if __name__ == "__main__":
    main()
