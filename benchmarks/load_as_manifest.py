"""The ort-cpu artifact loaded the way its manifest says, against the raw export on ONNX Runtime's
defaults: the manifest once said the level the artifact was saved at ("extended"), and loaded so a
model lost ORT's NCHWc layouts (issue 51 measured MobileNetV3-L at 1.95x the raw export's time).

    .venv/bin/python benchmarks/load_as_manifest.py [--only NAME ...] [--rounds 40]

Per model of the corpus (benchmarks/corpus.py; its hint shapes, batch 1): `deploycc build
--target ort-cpu`, then in one process, interleaved (the order rotates every round): the raw
export at ORT's defaults, the artifact as the manifest's `load` settings say, and the artifact
at the level it was saved at (what the old manifest said). Ratio of medians to the raw export,
with a 95% bootstrap interval. 2 threads each. Writes results/load-as-manifest.json and .md.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.rotation import rotated_times  # noqa: E402

MODELS = ("tv_resnet18_ts_op11", "tv_mobilenet_v2_ts_op13", "tv_mobilenet_v3_small_ts_op17",
          "tv_efficientnet_b0_ts_op13", "tv_convnext_tiny_dynamo_op18", "tv_vit_s16_ts_op17",
          "tv_lraspp_mobilenet_v3_large_ts_op13", "hf_bert_ts_op14", "rapidocr_ppocrv4_det")
THREADS = 2
RUNS_PER_TURN = 3


def _session(path: Path, options: dict) -> object:
    import onnxruntime as ort

    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = THREADS
    session_options.log_severity_level = 3
    for name, value in options.items():
        if name == "graph_optimization_level":
            value = getattr(ort.GraphOptimizationLevel, value)
        setattr(session_options, name, value)
    return ort.InferenceSession(str(path), session_options, providers=["CPUExecutionProvider"])


def _measure(name: str, rounds: int, workdir: Path) -> dict:
    from deploycc import api
    from deploycc.bench.run import bootstrap_ratio
    from deploycc.options import BuildOptions, LegalizeOptions

    model = HERE / "corpus" / f"{name}.onnx"
    shapes = json.loads((HERE / "corpus" / f"{name}.hints.json").read_text()).get("shapes", {})
    out = workdir / name
    options = BuildOptions(legalize=LegalizeOptions(shapes=shapes), bench=False)
    report = api.build(model, "ort-cpu", out, options)
    if report.artifact is None:
        return {"model": name, "status": str(report.status), "summary": report.summary}
    settings = json.loads((out / "manifest.json").read_text())["artifact"]["settings"]
    artifact = out / report.artifact.files[0]
    subjects = {"raw": _session(model, {}),
                "as manifest says": _session(artifact, settings["load"]["session_options"]),
                "at the saved level": _session(artifact, {"graph_optimization_level": "ORT_ENABLE_EXTENDED"})}
    with np.load(out / "verify-inputs.npz") as data:
        names = [i.name for i in subjects["raw"].get_inputs()]
        feeds = {key: data[key] for key in data.files if key in names}
    runs = {key: functools.partial(session.run, None, feeds) for key, session in subjects.items()}
    times = rotated_times(runs, rounds, RUNS_PER_TURN)
    raw = np.array(times["raw"])
    row = {"model": name, "status": str(report.status), "raw_ms": round(float(np.median(raw)) * 1e3, 3)}
    for key in ("as manifest says", "at the saved level"):
        mine = np.array(times[key])
        row[key] = {"ratio": round(float(np.median(mine) / np.median(raw)), 3),
                    "interval": bootstrap_ratio(mine, raw)}
    return row


def _markdown(rows: list[dict]) -> str:
    lines = ["| model | raw export, ORT defaults (ms) | artifact as the manifest says | "
             "artifact at its saved level (the old manifest) |",
             "|---|---|---|---|"]
    for row in rows:
        if "raw_ms" not in row:
            lines.append(f"| {row['model']} | {row['status']}: {row['summary']} | | |")
            continue
        cells = [f"{row[key]['ratio']:.2f}x [{row[key]['interval'][0]:.2f}, {row[key]['interval'][1]:.2f}]"
                 for key in ("as manifest says", "at the saved level")]
        lines.append(f"| {row['model']} | {row['raw_ms']:.2f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    from rich.progress import track

    rows = []
    with tempfile.TemporaryDirectory(prefix="deploycc-load-") as folder:
        for name in track(args.only or MODELS, description="models"):
            rows.append(_measure(name, args.rounds, Path(folder)))
    results = HERE / "results"
    (results / "load-as-manifest.json").write_text(json.dumps(rows, indent=1) + "\n")
    (results / "load-as-manifest.md").write_text(_markdown(rows))
    print(_markdown(rows))


if __name__ == "__main__":
    main()
