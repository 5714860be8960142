"""The zoo's families beyond timm, transformers and torchvision (catalog.py registers them):

    ultralytics                   YOLO v5u/v6/v8/v9/v10/11/12/26 from their yaml files (detect, and for
                                  v8 and 11 also segment, pose, OBB, classify), in the head's export
                                  mode, as `yolo export format=onnx dynamic=True` sets it
    segmentation-models-pytorch   every decoder on a small encoder

Random weights with a signal, nothing downloaded (ultralytics builds from the yaml files in its
wheel). Exports spread over both exporters and opsets as the other families'.
"""

from __future__ import annotations

import functools
from typing import Any

from catalog import ZooModel, spread, with_signal

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
