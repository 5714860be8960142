"""The zoo's families beyond timm, transformers and torchvision (catalog.py registers them):

    ultralytics                   YOLO v5u/v6/v8/v9/v10/11/12/26 from their yaml files (detect, and for
                                  v8 and 11 also segment, pose, OBB, classify), in the head's export
                                  mode, as `yolo export format=onnx dynamic=True` sets it
    segmentation-models-pytorch   every decoder on a small encoder
    trees                         LightGBM and XGBoost classifiers, regressors and rankers fitted on
                                  data with missing values, converted by onnxmltools
    keras                         keras.applications image models, exported by Keras 3's own
                                  Model.export(format="onnx") (tf2onnx)
    open_clip                     CLIP-style image and text towers, each exported on its own
                                  (encode_image / encode_text, normalized embeddings)
    paddle                        paddle.vision models and text classifiers (Transformer, LSTM,
                                  GRU), exported by paddle.onnx.export (paddle2onnx) in an
                                  environment of their own (paddle_worker.py)

Random weights with a signal, nothing downloaded (ultralytics builds from the yaml files in its
wheel). Exports spread over both exporters and opsets as the other families'.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo_model import ZooModel, spread, with_signal

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# yaml (the scale letter picks the size), task
YOLO = [
    ("yolov8n.yaml", "detect"),
    ("yolov8n-seg.yaml", "segment"),
    ("yolov8n-pose.yaml", "pose"),
    ("yolov8n-obb.yaml", "obb"),
    ("yolov8n-cls.yaml", "classify"),
    ("yolo11n.yaml", "detect"),
    ("yolo11n-seg.yaml", "segment"),
    ("yolo11n-pose.yaml", "pose"),
    ("yolo11n-obb.yaml", "obb"),
    ("yolo11n-cls.yaml", "classify"),
    ("yolov5nu.yaml", "detect"),
    ("yolov6n.yaml", "detect"),
    ("yolov9t.yaml", "detect"),
    ("yolov10n.yaml", "detect"),
    ("yolo12n.yaml", "detect"),
    ("yolo26n.yaml", "detect"),
]
YOLO_OUTPUTS = {"segment": ["output0", "output1"]}


def yolo_models() -> list[ZooModel]:
    import ultralytics

    made = []
    for index, (yaml, task) in enumerate(YOLO):
        size = 224 if task == "classify" else 640
        shape = [1, 3, size, size]
        name = "yolo_" + yaml.removesuffix(".yaml").replace("-", "_")
        axes = {0: "batch"} if task == "classify" else {0: "batch", 2: "height", 3: "width"}
        made.append(ZooModel(
            name, "ultralytics", task, functools.partial(_yolo, yaml, shape),
            functools.partial(_image, shape), ["images"], YOLO_OUTPUTS.get(task, ["output0"]),
            {"images": axes}, spread(index),
            f"ultralytics {ultralytics.__version__} {yaml} (random weights with signal)"))
    return made


def _image(shape: list[int], batch: int) -> tuple[Any, ...]:
    import torch

    return (torch.rand(batch, *shape[1:], generator=torch.Generator().manual_seed(0)),)


def _yolo(yaml: str, shape: list[int]) -> Any:
    """The network as ultralytics' exporter hands it to torch.onnx.export: BatchNorm fused, the
    heads in export mode with dynamic shapes (boxes decoded in the graph, one output tensor)."""
    from ultralytics import YOLO
    from ultralytics.nn.modules import C2f
    from ultralytics.nn.modules.head import Detect

    model = with_signal(YOLO(yaml, verbose=False).model, shape).fuse(verbose=False)
    for module in model.modules():
        if isinstance(module, Detect):
            module.dynamic, module.export, module.format = True, True, "onnx"
        elif isinstance(module, C2f):
            module.forward = module.forward_split  # what the exporter does, for the exporters' sake
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model.eval()


# decoder, encoder
SMP = [
    ("Unet", "resnet18"),
    ("UnetPlusPlus", "resnet18"),
    ("FPN", "mobilenet_v2"),
    ("DeepLabV3", "resnet18"),
    ("DeepLabV3Plus", "efficientnet-b0"),
    ("PSPNet", "resnet18"),
    ("Linknet", "resnet18"),
    ("MAnet", "resnet18"),
    ("PAN", "resnet18"),
    ("UPerNet", "resnet18"),
    ("Segformer", "mit_b0"),
    ("DPT", "tu-vit_tiny_patch16_224"),
]


def smp_models() -> list[ZooModel]:
    import segmentation_models_pytorch as smp

    made = []
    for index, (decoder, encoder) in enumerate(SMP):
        shape = [1, 3, 224, 224] if decoder == "DPT" else [1, 3, 256, 256]
        name = f"smp_{decoder.lower()}_{encoder.replace('-', '_').replace('tu_', '')}"
        axes = {0: "batch"} if decoder == "DPT" else {0: "batch", 2: "height", 3: "width"}
        made.append(ZooModel(
            name, "segmentation-models-pytorch", decoder, functools.partial(_smp, decoder, encoder, shape),
            functools.partial(_image, shape), ["input"], ["mask"], {"input": axes}, spread(index),
            f"segmentation-models-pytorch {smp.__version__} {decoder}({encoder}) "
            "(random weights with signal)"))
    return made


def _smp(decoder: str, encoder: str, shape: list[int]) -> Any:
    import segmentation_models_pytorch as smp

    model = getattr(smp, decoder)(encoder_name=encoder, encoder_weights=None, classes=3)
    return with_signal(model, shape)


# --------------------------------------------------------------------------- gradient-boosted trees

# library, estimator, task, keyword arguments; each fitted on FEATURES columns with a tenth of the
# values missing (NaN), as tabular data comes, and converted by onnxmltools as its docs show
TREES = [
    ("lightgbm", "LGBMClassifier", "binary", {}),
    ("lightgbm", "LGBMClassifier", "multiclass", {}),
    ("lightgbm", "LGBMRegressor", "regression", {}),
    ("lightgbm", "LGBMClassifier", "binary_zero_missing", {"zero_as_missing": True}),
    ("lightgbm", "LGBMRanker", "ranking", {}),
    ("xgboost", "XGBClassifier", "binary", {}),
    ("xgboost", "XGBClassifier", "multiclass", {}),
    ("xgboost", "XGBRegressor", "regression", {}),
    ("xgboost", "XGBRanker", "ranking", {}),
    ("xgboost", "XGBClassifier", "binary_deep", {"max_depth": 8, "n_estimators": 60}),
]
TREE_OPSETS = (9, 11, 13, 14, 15)  # onnxmltools converts up to 15
FEATURES = 12


def tree_models() -> list[ZooModel]:
    import lightgbm
    import onnxmltools
    import xgboost

    versions = {"lightgbm": lightgbm.__version__, "xgboost": xgboost.__version__}
    made = []
    for index, (library, estimator, task, settings) in enumerate(TREES):
        prefix = "lgb" if library == "lightgbm" else "xgb"
        opset = TREE_OPSETS[index % len(TREE_OPSETS)]
        # a classifier as converted by default (ZipMap: a list of maps per row), and every other
        # one with zipmap=False, as onnxmltools' docs show for serving
        zipmap = "Classifier" in estimator and index % 2 == 0
        outputs = ["label", "probabilities"] if "Classifier" in estimator else ["variable"]
        made.append(ZooModel(
            f"{prefix}_{task}", "trees", library,
            functools.partial(_fitted, library, estimator, task, settings),
            _rows, ["input"], outputs, {"input": {0: "batch"}}, [("onnxmltools", opset)],
            f"{library} {versions[library]} {estimator} ({task}), fitted on {FEATURES} random columns with "
            f"10% missing; onnxmltools {onnxmltools.__version__}, zipmap={zipmap}",
            convert=functools.partial(_convert_trees, library, zipmap), predict=_predict_trees,
            count=_tree_nodes))
    return made


def _rows(batch: int) -> tuple[Any, ...]:
    import numpy as np

    rng = np.random.default_rng(1)
    rows = rng.standard_normal((batch, FEATURES)).astype(np.float32)
    rows[rng.random(rows.shape) < 0.1] = np.nan
    return (rows,)


def _fitted(library: str, estimator: str, task: str, settings: dict[str, Any]) -> Any:
    import importlib

    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, FEATURES)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    filled = np.nan_to_num(x)
    score = filled[:, 0] + 0.5 * filled[:, 1] - filled[:, 2] * filled[:, 3]
    target = {"binary": (score > 0).astype(int), "multiclass": np.digitize(score, [-0.7, 0.7]),
              "regression": score, "ranking": np.digitize(score, [-1, 0, 1])}[task.split("_")[0]]
    arguments = {"n_estimators": 30, **({"num_leaves": 15, "verbose": -1} if library == "lightgbm" else
                                         {"max_depth": 4}), **settings}
    model = getattr(importlib.import_module(library), estimator)(**arguments)
    if task == "ranking":  # queries of 20 rows
        groups = [20] * (len(x) // 20)
        model.fit(x, target, group=groups) if library == "lightgbm" else \
            model.fit(x, target, qid=np.repeat(np.arange(len(groups)), 20))
    else:
        model.fit(x, target)
    return model


def _convert_trees(library: str, zipmap: bool, model: Any, opset: int, path: Any) -> str:
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    types = [("input", FloatTensorType([None, FEATURES]))]
    if library == "lightgbm":
        onnx_model = onnxmltools.convert_lightgbm(model, initial_types=types, target_opset=opset,
                                                  zipmap=zipmap)
    else:
        onnx_model = onnxmltools.convert_xgboost(model, initial_types=types, target_opset=opset)
    onnxmltools.utils.save_model(onnx_model, str(path))
    return "dynamic {'input': {0: 'batch'}}"


def _predict_trees(model: Any, inputs: tuple[Any, ...]) -> list[Any]:
    """What the library predicts: the label and the probabilities of a classifier, a regressor's
    or ranker's values as a column."""
    import numpy as np

    if hasattr(model, "predict_proba"):
        return [model.predict(inputs[0]), model.predict_proba(inputs[0]).astype(np.float32)]
    return [model.predict(inputs[0]).astype(np.float32).reshape(-1, 1)]


def _tree_nodes(model: Any) -> int:
    """The fitted ensemble's nodes (its size, where a network counts parameters)."""
    if hasattr(model, "booster_"):  # LightGBM: a tree of L leaves has 2L - 1 nodes
        return sum(2 * tree["num_leaves"] - 1 for tree in model.booster_.dump_model()["tree_info"])
    return sum(len(tree.strip().splitlines()) for tree in model.get_booster().get_dump())  # a line a node


# --------------------------------------------------------------------------- Keras (tf2onnx)

# keras.applications builders (random weights: weights=None, nothing downloaded), image size
KERAS = [
    ("MobileNetV2", 224), ("MobileNetV3Small", 224), ("ResNet50", 224), ("ResNet50V2", 224),
    ("DenseNet121", 224), ("ConvNeXtTiny", 224), ("Xception", 299), ("InceptionV3", 299),
    ("NASNetMobile", 224), ("EfficientNetV2B0", 224), ("MobileNetV3Large", 224), ("EfficientNetB0", 224),
]
KERAS_OPSETS = (11, 13, 15, 17)


def keras_models() -> list[ZooModel]:
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # torchvision (timm and open_clip import it) imported after tensorflow ends the process with a
    # segfault (tensorflow-cpu 2.21 beside torchvision 0.29): a zoo run that lists keras before a torch
    # family, or a worker given a keras model then a torch one, would die there
    with contextlib.suppress(ImportError):
        import torchvision  # noqa: F401
    import keras
    import tf2onnx

    made = []
    for index, (builder, size) in enumerate(KERAS):
        made.append(ZooModel(
            f"keras_{builder.lower()}", "keras", builder, functools.partial(_keras, builder, size),
            functools.partial(_nhwc, size), ["input"], ["logits"], {"input": {0: "batch"}},
            [("tf2onnx", KERAS_OPSETS[index % len(KERAS_OPSETS)])],
            f"keras {keras.__version__} applications.{builder}(weights=None, logits out), exported by "
            f"Model.export(format='onnx') (tf2onnx {tf2onnx.__version__})",
            convert=functools.partial(_export_keras, size), predict=_predict_keras,
            count=lambda model: int(model.count_params())))
    return made


def _keras(builder: str, size: int) -> Any:
    """Random weights with a signal, as trained ones have: each BatchNormalization's statistics
    taken from a batch of images (as the torch families' with_signal does). Left at their
    initial values, MobileNet's activations fade to 1e-10 by the logits."""
    import keras

    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, builder)(weights=None, input_shape=(size, size, 3),
                                                 classifier_activation=None)
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in norms:
        layer.momentum = 0.0  # the next training-mode call sets the statistics to the batch's
    model(_nhwc(size, 4)[0], training=True)
    for layer in norms:
        layer.momentum = 0.99
    return model


def _nhwc(size: int, batch: int) -> tuple[Any, ...]:
    import numpy as np

    return (np.random.default_rng(0).random((batch, size, size, 3), dtype=np.float32) * 255,)


def _export_keras(size: int, model: Any, opset: int, path: Any) -> str:
    """As Keras 3 users export: Model.export, the input named and its batch dynamic."""
    import tensorflow as tf

    signature = [tf.TensorSpec((None, size, size, 3), tf.float32, name="input")]
    model.export(str(path), format="onnx", opset_version=opset, verbose=False, input_signature=signature)
    return "dynamic {'input': {0: 'batch'}}"


def _predict_keras(model: Any, inputs: tuple[Any, ...]) -> list[Any]:
    return [model(inputs[0], training=False).numpy()]


# --------------------------------------------------------------------------- open_clip towers

# model config, tower: the image tower (encode_image) and the text tower (encode_text), each
# exported on its own as a retrieval service deploys them, embeddings normalized
OPEN_CLIP = [
    ("RN50", "image"),
    ("RN50", "text"),
    ("ViT-B-32", "image"),
    ("ViT-B-32", "text"),
    ("convnext_tiny", "image"),
    ("ViT-B-16-SigLIP", "image"),
    ("ViT-B-16-SigLIP", "text"),
    ("EVA02-B-16", "image"),
    ("coca_ViT-B-32", "image"),
    ("MobileCLIP-S1", "image"),
]


def open_clip_models() -> list[ZooModel]:
    import open_clip

    made = []
    for index, (config, tower) in enumerate(OPEN_CLIP):
        name = f"clip_{config.lower().replace('-', '_')}_{tower}"
        settings = open_clip.get_model_config(config)
        if tower == "image":
            size = settings["vision_cfg"].get("image_size", 224)
            shape = [1, 3, size, size] if isinstance(size, int) else [1, 3, *size]
            inputs, names, axes = functools.partial(_image, shape), ["image"], {"image": {0: "batch"}}
        else:
            length = settings["text_cfg"].get("context_length", 77)
            vocab = settings["text_cfg"].get("vocab_size", 49408)
            shape = [1, length]
            inputs = functools.partial(_tokens, length, vocab)
            names, axes = ["text"], {"text": {0: "batch"}}
        made.append(ZooModel(
            name, "open_clip", tower, functools.partial(_clip_tower, config, tower, shape), inputs,
            names, ["embedding"], axes, spread(index),
            f"open_clip {open_clip.__version__} {config} {tower} tower (random weights with signal)"))
    return made


def _tokens(length: int, vocab: int, batch: int) -> tuple[Any, ...]:
    """Token ids as a tokenizer gives them: a start token, words, the end token (the largest id,
    where CLIP's text tower pools), padding."""
    import torch

    ids = torch.zeros(batch, length, dtype=torch.int64)
    words = torch.randint(1, vocab - 2, (batch, 12), generator=torch.Generator().manual_seed(0))
    ids[:, 0], ids[:, 1:13], ids[:, 13] = vocab - 2, words, vocab - 1
    return (ids,)


def _clip_tower(config: str, tower: str, shape: list[int]) -> Any:
    import open_clip
    import torch

    model = open_clip.create_model(config, pretrained=None)
    if tower == "image":  # the text tower's modules go: the export holds one tower, as deployed
        model.visual = with_signal(model.visual, shape)
        for part in ("text", "text_decoder", "transformer", "token_embedding", "ln_final"):
            if isinstance(getattr(model, part, None), torch.nn.Module):
                setattr(model, part, None)
    else:
        model.visual = None

    class Tower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.clip = model

        def forward(self, x: Any) -> Any:
            encode = self.clip.encode_image if tower == "image" else self.clip.encode_text
            return encode(x, normalize=True)

    return Tower().eval()


# --------------------------------------------------------------------------- PaddlePaddle (paddle2onnx)

PADDLE_OPSETS = (11, 13, 15, 17, 19)
# paddle2onnx pins an older onnx than deploycc's: Paddle runs in an environment of its own
# (`make zoo` makes it), each step in a process of paddle_worker.py there
PADDLE_PYTHON = Path(os.environ.get("ZOO_PADDLE_PYTHON", REPO / ".venv-paddle" / "bin" / "python"))


@dataclass(frozen=True)
class PaddleModel:
    """A Paddle model as the zoo's worker sees it: its builder, built in the Paddle environment at
    each step (the same weights each time: seed 0)."""

    builder: str

    def step(self, *arguments: str) -> str:
        import subprocess

        done = subprocess.run([str(PADDLE_PYTHON), str(HERE / "paddle_worker.py"), *arguments],
                              capture_output=True, text=True, timeout=600)
        if done.returncode:
            lines = [line for line in done.stderr.splitlines() if line.strip()] or [f"exit {done.returncode}"]
            raise RuntimeError(f"paddle_worker {' '.join(arguments)}: {lines[-1]}")
        return done.stdout


def paddle_models() -> list[ZooModel]:
    from paddle_worker import BUILDERS, TOKENS

    made = []
    for index, (builder, (kind, _)) in enumerate(BUILDERS.items()):
        made.append(ZooModel(
            f"pd_{builder}", "paddle", "text" if kind == TOKENS else "vision",
            functools.partial(_paddle, builder), functools.partial(_paddle_inputs, builder), ["input"],
            ["logits"], {"input": {0: "batch"}}, [("paddle2onnx", PADDLE_OPSETS[index % len(PADDLE_OPSETS)])],
            f"paddle {builder} (random weights, BatchNorm statistics from a batch), exported by "
            "paddle.onnx.export (paddle2onnx) with a dynamic batch",
            convert=_export_paddle, predict=_predict_paddle,
            count=lambda model: int(model.step("count", model.builder).split()[-1])))
    return made


def _paddle(builder: str) -> PaddleModel:
    if not PADDLE_PYTHON.exists():
        raise FileNotFoundError(f"no Paddle environment at {PADDLE_PYTHON}: `make zoo` makes it "
                                "(or set ZOO_PADDLE_PYTHON)")
    return PaddleModel(builder)


def _paddle_inputs(builder: str, batch: int) -> tuple[Any, ...]:
    from paddle_worker import inputs

    return (inputs(builder, batch),)


def _export_paddle(model: PaddleModel, opset: int, path: Any) -> str:
    model.step("export", model.builder, str(opset), str(path))
    return "dynamic {'input': {0: 'batch'}}"


def _predict_paddle(model: PaddleModel, inputs: tuple[Any, ...]) -> list[Any]:
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as folder:
        given, wanted = Path(folder) / "inputs.npz", Path(folder) / "outputs.npz"
        np.savez(given, input=inputs[0])
        model.step("predict", model.builder, str(given), str(wanted))
        with np.load(wanted) as saved:  # arr_0, arr_1, ...: the outputs in order
            return [saved[f"arr_{index}"] for index in range(len(saved.files))]
