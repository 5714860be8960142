"""The zoo's torch models, by name: each a module built from code or a small config (random weights,
nothing downloaded), its example inputs, the axes a user would keep dynamic, and the exports the zoo
writes of it (exporter, opset). `make.py` exports them to ONNX; `factories.py` hands the same modules
to deploycc's PyTorch front end (`benchmarks/zoo/factories.py:NAME`).

    timm          one architecture per model family at least (the smallest real one), more for the
                  families users deploy most
    transformers  encoders, decoder-only models (with present key values out, and without), encoder-
                  decoders, vision and audio models, each from a small config of its own type
    torchvision   every builder: classification, detection, segmentation, video, optical flow
    ultralytics, segmentation-models-pytorch, trees, keras, open_clip, paddle   in more_families.py

How each model's exports are spread over the exporters and opsets (11-20), and the ZooModel record,
are zoo_model.py's, shared with more_families.py, which this module imports (one way only).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from zoo_model import ZooModel, spread, with_signal

# --------------------------------------------------------------------------- timm

# The smallest real architecture of each timm model module (by parameters, at timm 1.0.31), and
# more of the families users deploy most. Families whose smallest model is a very large vision tower
# are listed in TIMM_LEFT_OUT with why.
TIMM = [
    "halonet_h1",
    "mobileone_s0",
    "repvgg_a0",
    "cait_xxs24_224",
    "coat_tiny",
    "convit_tiny",
    "convmixer_768_32",
    "convnext_atto",
    "convnext_nano",
    "cpubone_nano",
    "crossvit_tiny_240",
    "csatv2",
    "cs3darknet_s",
    "cspnext_tiny",
    "davit_tiny",
    "deit_tiny_patch16_224",
    "deit_tiny_distilled_patch16_224",
    "densenet121",
    "dla46_c",
    "dla34",
    "dpn48b",
    "edgenext_xx_small",
    "efficientformer_l1",
    "efficientformerv2_s0",
    "efficientnet_b0",
    "tf_efficientnet_lite0",
    "mobilenetv2_050",
    "efficientnetv2_rw_t",
    "mixnet_s",
    "efficientvim_m1",
    "efficientvit_b0",
    "efficientvit_m0",
    "eva02_tiny_patch14_224",
    "fasternet_t0",
    "fastvit_t8",
    "focalnet_tiny_srf",
    "gcvit_xxtiny",
    "ghostnet_050",
    "hardcorenas_a",
    "hgnetv2_b0",
    "hiera_tiny_224",
    "hieradet_small",
    "hrnet_w18_small",
    "iformer_t",
    "inception_next_atto",
    "inception_resnet_v2",
    "inception_v3",
    "inception_v4",
    "lcnetv2_small",
    "levit_128s",
    "levit_conv_128s",
    "lowformer_b0",
    "mambaout_femto",
    "maxvit_pico_rw_256",
    "coatnet_nano_rw_224",
    "maxxvit_rmlp_nano_rw_256",
    "poolformerv2_s12",
    "convformer_s18",
    "gmlp_ti16_224",
    "mixer_s32_224",
    "resmlp_12_224",
    "mobilenetv3_small_050",
    "mobilenetv3_large_100",
    "lcnet_050",
    "mobilevit_xxs",
    "mobilevitv2_050",
    "mvitv2_tiny",
    "nest_tiny",
    "nextvit_small",
    "nf_regnet_b0",
    "nf_resnet26",
    "pit_ti_224",
    "pvt_v2_b0",
    "rdnet_tiny",
    "regnetx_002",
    "regnety_002",
    "regnetz_005",
    "repghostnet_050",
    "repvit_m1",
    "res2next50",
    "resnest14d",
    "resnet10t",
    "resnet18",
    "resnet50",
    "resnet18d",
    "seresnext26d_32x4d",
    "resnetv2_18",
    "rexnet_100",
    "selecsls42",
    "legacy_seresnet18",
    "sequencer2d_s",
    "shvit_s1",
    "skresnet18",
    "starnet_s050",
    "swiftformer_xs",
    "swin_tiny_patch4_window7_224",
    "swinv2_tiny_window8_256",
    "swinv2_cr_tiny_224",
    "tiny_vit_5m_224",
    "tnt_s_patch16_224",
    "tresnet_m",
    "twins_svt_small",
    "vgg11",
    "visformer_tiny",
    "vit_tiny_patch16_224",
    "vit_small_patch16_224",
    "vit_base_patch32_224",
    "vit_tiny_r_s16_p8_224",
    "vit_srelpos_small_patch16_224",
    "samvit_base_patch16_224",
    "vitamin_small_224",
    "volo_d1_224",
    "ese_vovnet19b_slim_dw",
    "legacy_xception",
    "xception41p",
    "xcit_nano_12_p16_224",
    "beit_base_patch16_224",
    "mobilenetv5_base",
    "nasnetalarge",
    "pnasnet5large",
    "naflexvit_base_patch16_gap",
]
TIMM_LEFT_OUT = {
    "deepseek_vit": "smallest model 412 M parameters at 546x546 (1.6 GB of weights): beyond the zoo's disk "
    "and time on two cores",
    "gemma4_vit": "smallest model 167 M parameters at 768x768, a language model's vision tower",
    "qwen3_vit": "smallest model 87 M parameters at 768x768, a language model's vision tower",
}
TIMM_HW_DYNAMIC = (
    "resnet",
    "efficientnet",
    "mobilenetv3",
    "regnet",
    "densenet",
    "dla",
    "ghostnet",
    "rexnet",
    "vgg",
    "hardcorenas",
    "repghost",
    "fasternet",
    "byobnet",
)


def timm_models() -> list[ZooModel]:
    import timm
    from timm.models import _registry

    made = []
    for index, name in enumerate(TIMM):
        group = _registry._model_to_module.get(name, "unknown")
        made.append(
            _image_model(
                f"timm_{name}",
                "timm",
                group,
                functools.partial(_timm, name),
                _timm_shape(name),
                index,
                hw=group in TIMM_HW_DYNAMIC,
                about=f"timm {timm.__version__} {name}",
            )
        )
    return made


@functools.cache
def _timm_shape(name: str) -> list[int]:
    from timm.models import get_pretrained_cfg

    config = get_pretrained_cfg(name)
    size = list(getattr(config, "input_size", None) or (3, 224, 224)) if config else [3, 224, 224]
    return [1, *size]


def _timm(name: str) -> Any:
    import timm

    return with_signal(timm.create_model(name, pretrained=False).eval(), _timm_shape(name))


def _image_model(
    name: str,
    family: str,
    group: str,
    make: Callable[[], Any],
    shape: list[int],
    index: int,
    *,
    hw: bool = False,
    about: str = "",
) -> ZooModel:
    import torch

    def inputs(batch: int) -> tuple[Any, ...]:
        generator = torch.Generator().manual_seed(0)
        return (torch.rand(batch, *shape[1:], generator=generator),)

    axes = {0: "batch", 2: "height", 3: "width"} if hw else {0: "batch"}
    return ZooModel(
        name, family, group, make, inputs, ["input"], ["output"], {"input": axes}, spread(index), about
    )


# --------------------------------------------------------------------------- transformers

SMALL_TEXT = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 512,
}
SEQ = 16

# name: (model type, model class, inputs kind, outputs, config overrides)
#   inputs kind: text, text-tt (with token_type_ids), causal, causal-past (present key values out),
#   seq2seq, image, audio, features (log-mel), spectrogram
TRANSFORMERS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "bert": ("BertModel", "text-tt", "last_hidden_state", {}),
    "roberta": ("RobertaModel", "text", "last_hidden_state", {}),
    "distilbert": (
        "DistilBertModel",
        "text",
        "last_hidden_state",
        {"dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128},
    ),
    "albert": ("AlbertModel", "text-tt", "last_hidden_state", {"embedding_size": 32}),
    "electra": ("ElectraModel", "text-tt", "last_hidden_state", {"embedding_size": 64}),
    "deberta": ("DebertaModel", "text", "last_hidden_state", {}),
    "deberta-v2": ("DebertaV2Model", "text", "last_hidden_state", {"vocab_size": 32000}),
    "mpnet": ("MPNetModel", "text", "last_hidden_state", {}),
    "xlm-roberta": ("XLMRobertaModel", "text", "last_hidden_state", {"vocab_size": 32000}),
    "convbert": ("ConvBertModel", "text-tt", "last_hidden_state", {"embedding_size": 64}),
    "squeezebert": ("SqueezeBertModel", "text", "last_hidden_state", {"embedding_size": 64}),
    "mobilebert": ("MobileBertModel", "text", "last_hidden_state", {"num_hidden_layers": 2}),
    "roformer": ("RoFormerModel", "text", "last_hidden_state", {"embedding_size": 64}),
    "megatron-bert": ("MegatronBertModel", "text", "last_hidden_state", {}),
    "ernie": ("ErnieModel", "text-tt", "last_hidden_state", {}),
    "esm": ("EsmModel", "text", "last_hidden_state", {"vocab_size": 33, "pad_token_id": 1}),
    "nystromformer": (
        "NystromformerModel",
        "text",
        "last_hidden_state",
        {"segment_means_seq_len": SEQ, "num_landmarks": SEQ},
    ),
    "canine": ("CanineModel", "text", "last_hidden_state", {}),
    "funnel": (
        "FunnelModel",
        "text",
        "last_hidden_state",
        {"block_sizes": [1, 1], "d_model": 64, "n_head": 2, "d_head": 32, "d_inner": 128},
    ),
    "modernbert": ("ModernBertModel", "text", "last_hidden_state", {"global_attn_every_n_layers": 2}),
    "xlnet": (
        "XLNetModel",
        "text",
        "last_hidden_state",
        {"d_model": 64, "n_layer": 2, "n_head": 2, "d_inner": 128},
    ),
    "gpt2": ("GPT2LMHeadModel", "causal", "logits", {}),
    "gpt2-past": ("GPT2LMHeadModel", "causal-past", "logits", {}),
    "gpt_neo": (
        "GPTNeoForCausalLM",
        "causal",
        "logits",
        {"attention_types": [[["global", "local"], 1]], "num_layers": 2},
    ),
    "gptj": ("GPTJForCausalLM", "causal", "logits", {"rotary_dim": 16}),
    "gpt_neox": ("GPTNeoXForCausalLM", "causal", "logits", {}),
    "opt": ("OPTForCausalLM", "causal", "logits", {"ffn_dim": 128, "word_embed_proj_dim": 64}),
    "bloom": ("BloomForCausalLM", "causal", "logits", {"n_layer": 2, "n_head": 2}),
    "llama": ("LlamaForCausalLM", "causal", "logits", {}),
    "llama-past": ("LlamaForCausalLM", "causal-past", "logits", {}),
    "mistral": ("MistralForCausalLM", "causal", "logits", {}),
    "qwen2": ("Qwen2ForCausalLM", "causal", "logits", {}),
    "qwen2-past": ("Qwen2ForCausalLM", "causal-past", "logits", {}),
    "qwen3": ("Qwen3ForCausalLM", "causal", "logits", {}),
    "phi": ("PhiForCausalLM", "causal", "logits", {}),
    "phi3": ("Phi3ForCausalLM", "causal", "logits", {}),
    "gemma": ("GemmaForCausalLM", "causal", "logits", {}),
    "gemma2": ("Gemma2ForCausalLM", "causal", "logits", {}),
    "falcon": ("FalconForCausalLM", "causal", "logits", {}),
    "codegen": ("CodeGenForCausalLM", "causal", "logits", {"rotary_dim": 16}),
    "stablelm": ("StableLmForCausalLM", "causal", "logits", {}),
    "olmo": ("OlmoForCausalLM", "causal", "logits", {}),
    "starcoder2": ("Starcoder2ForCausalLM", "causal", "logits", {}),
    "granite": ("GraniteForCausalLM", "causal", "logits", {}),
    "smollm3": ("SmolLM3ForCausalLM", "causal", "logits", {}),
    "t5": (
        "T5Model",
        "seq2seq",
        "last_hidden_state",
        {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 2, "d_kv": 32},
    ),
    "bart": (
        "BartModel",
        "seq2seq",
        "last_hidden_state",
        {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2},
    ),
    "marian": (
        "MarianMTModel",
        "seq2seq",
        "logits",
        {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "vocab_size": 32000},
    ),
    "mbart": (
        "MBartModel",
        "seq2seq",
        "last_hidden_state",
        {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "vocab_size": 32000},
    ),
    "pegasus": (
        "PegasusModel",
        "seq2seq",
        "last_hidden_state",
        {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2},
    ),
    "m2m_100": (
        "M2M100Model",
        "seq2seq",
        "last_hidden_state",
        {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "vocab_size": 32000},
    ),
    "blenderbot-small": (
        "BlenderbotSmallModel",
        "seq2seq",
        "last_hidden_state",
        {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2},
    ),
    "vit": ("ViTModel", "image", "last_hidden_state", {"image_size": 64, "patch_size": 8}),
    "deit": ("DeiTModel", "image", "last_hidden_state", {"image_size": 64, "patch_size": 8}),
    "beit": ("BeitModel", "image", "last_hidden_state", {"image_size": 64, "patch_size": 8}),
    "dinov2": ("Dinov2Model", "image", "last_hidden_state", {"image_size": 64, "patch_size": 8}),
    "swin": (
        "SwinModel",
        "image",
        "last_hidden_state",
        {"image_size": 64, "embed_dim": 32, "depths": [1, 1], "num_heads": [2, 2]},
    ),
    "convnext": ("ConvNextModel", "image", "pooler_output", {}),
    "convnextv2": ("ConvNextV2Model", "image", "pooler_output", {}),
    "resnet": ("ResNetModel", "image", "pooler_output", {}),
    "regnet": ("RegNetModel", "image", "pooler_output", {}),
    "mobilevit": ("MobileViTModel", "image", "pooler_output", {"image_size": 64}),
    "mobilenet_v2": ("MobileNetV2Model", "image", "pooler_output", {}),
    "levit": ("LevitModel", "image", "pooler_output", {}),
    "poolformer": ("PoolFormerModel", "image", "last_hidden_state", {}),
    "segformer": ("SegformerForSemanticSegmentation", "image", "logits", {}),
    "dpt": ("DPTForDepthEstimation", "image", "predicted_depth", {"image_size": 64, "patch_size": 8}),
    "yolos": (
        "YolosForObjectDetection",
        "image",
        "logits",
        {"image_size": [64, 64], "patch_size": 8, "num_detection_tokens": 10},
    ),
    "cvt": ("CvtModel", "image", "last_hidden_state", {}),
    "focalnet": ("FocalNetModel", "image", "pooler_output", {"embed_dim": 32, "depths": [1, 1]}),
    "wav2vec2": ("Wav2Vec2Model", "audio", "last_hidden_state", {}),
    "hubert": ("HubertModel", "audio", "last_hidden_state", {}),
    "wavlm": ("WavLMModel", "audio", "last_hidden_state", {}),
    "data2vec-audio": ("Data2VecAudioModel", "audio", "last_hidden_state", {}),
    "sew": ("SEWModel", "audio", "last_hidden_state", {}),
    "whisper": (
        "WhisperModel",
        "features",
        "last_hidden_state",
        {
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "num_mel_bins": 80,
            "max_source_positions": 100,
        },
    ),
    "audio-spectrogram-transformer": (
        "ASTModel",
        "spectrogram",
        "pooler_output",
        {"max_length": 128, "num_mel_bins": 64},
    ),
}
IMAGE = 64  # vision configs are made for 64x64 inputs where they take a size; others at 224
AUDIO_SAMPLES = 4000


def transformers_models() -> list[ZooModel]:
    import transformers

    made = []
    for index, (kind, (cls, inputs_kind, output, overrides)) in enumerate(TRANSFORMERS.items()):
        model_type = kind.removesuffix("-past")
        names, dynamic, shapes = _hf_inputs(inputs_kind, overrides)
        outputs = [output] if inputs_kind != "causal-past" else [output, "present_key_0", "present_value_0"]
        made.append(
            ZooModel(
                f"hf_{kind.replace('-', '_')}",
                "transformers",
                model_type,
                functools.partial(_hf_model, model_type, cls, inputs_kind, output, overrides),
                functools.partial(_hf_example, inputs_kind, shapes),
                names,
                outputs,
                dynamic,
                spread(index),
                f"transformers {transformers.__version__} {cls} from a small {model_type} config",
            )
        )
    return made


def _hf_inputs(
    kind: str, overrides: dict[str, Any]
) -> tuple[list[str], dict[str, dict[int, str]], dict[str, list[int]]]:
    text = {0: "batch", 1: "sequence"}
    if kind in ("text", "causal", "causal-past"):
        return (
            ["input_ids", "attention_mask"],
            {"input_ids": text, "attention_mask": text},
            {"input_ids": [1, SEQ], "attention_mask": [1, SEQ]},
        )
    if kind == "text-tt":
        names = ["input_ids", "attention_mask", "token_type_ids"]
        return names, dict.fromkeys(names, text), {key: [1, SEQ] for key in names}
    if kind == "seq2seq":
        names = ["input_ids", "attention_mask", "decoder_input_ids"]
        return (
            names,
            {
                "input_ids": text,
                "attention_mask": text,
                "decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
            },
            {key: [1, SEQ] for key in names},
        )
    if kind == "image":
        size = IMAGE if "image_size" in overrides else 224
        return ["pixel_values"], {"pixel_values": {0: "batch"}}, {"pixel_values": [1, 3, size, size]}
    if kind == "audio":
        return (
            ["input_values"],
            {"input_values": {0: "batch", 1: "samples"}},
            {"input_values": [1, AUDIO_SAMPLES]},
        )
    if kind == "features":  # Whisper: log-mel frames, twice the encoder positions
        frames = 2 * overrides["max_source_positions"]
        return (
            ["input_features", "decoder_input_ids"],
            {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "sequence"}},
            {"input_features": [1, 80, frames], "decoder_input_ids": [1, 4]},
        )
    if kind == "spectrogram":
        return (
            ["input_values"],
            {"input_values": {0: "batch"}},
            {"input_values": [1, overrides["max_length"], overrides["num_mel_bins"]]},
        )
    raise ValueError(kind)


def _hf_example(kind: str, shapes: dict[str, list[int]], batch: int) -> tuple[Any, ...]:
    import torch

    generator = torch.Generator().manual_seed(0)
    made = []
    for name, shape in shapes.items():
        dims = [batch, *shape[1:]]
        if name in ("input_ids", "decoder_input_ids"):
            made.append(torch.randint(3, 30, dims, generator=generator))
        elif name == "attention_mask":
            made.append(torch.ones(dims, dtype=torch.int64))
        elif name == "token_type_ids":
            made.append(torch.zeros(dims, dtype=torch.int64))
        else:
            made.append(
                torch.randn(dims, generator=generator)
                if kind != "image"
                else torch.rand(dims, generator=generator)
            )
    return tuple(made)


def _hf_model(model_type: str, cls: str, kind: str, output: str, overrides: dict[str, Any]) -> Any:
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(model_type)
    small = {**(SMALL_TEXT if kind not in ("image", "spectrogram") else {}), **overrides}
    if (
        kind in ("image",)
        and "hidden_size" in config.to_dict()
        and not isinstance(config.hidden_size, list)
        and "image_size" in overrides
    ):
        small = {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            **small,
        }
    if kind in ("audio",):
        small = {
            **small,
            "conv_dim": [32, 32],
            "conv_kernel": [10, 3],
            "conv_stride": [5, 2],
            "num_feat_extract_layers": 2,
            "num_conv_pos_embeddings": 16,
        }
    if kind == "spectrogram":
        small = {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            **small,
        }
    for key, value in small.items():
        if hasattr(config, key) or key in config.attribute_map:
            try:
                setattr(config, key, value)
            except NotImplementedError:  # a size this type derives from others (Funnel's layers)
                pass
    config.use_cache = kind == "causal-past"
    config._attn_implementation = "eager"  # SDPA has no ONNX translation below opset 14 (as optimum does)
    model = getattr(transformers, cls)(config).eval()
    torch.manual_seed(0)
    model = _hf_signal(model)
    if kind == "image":  # fresh BatchNorm statistics shrink a random network's output to nothing
        size = IMAGE if "image_size" in overrides else 224  # (MobileViT's pooler_output: below 1e-6)
        model = with_signal(model, [1, 3, size, size])

    names = _hf_inputs(kind, overrides)[0]

    class Outputs(torch.nn.Module):
        """Tensors in by name, the named output(s) out, as optimum exports them."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def run(self, *args: Any) -> Any:
            result = self.model(**dict(zip(names, args, strict=True)))
            if kind == "causal-past":
                cache = result.past_key_values
                layer = cache.layers[0] if hasattr(cache, "layers") else None
                key, value = (layer.keys, layer.values) if layer is not None else cache[0]
                return result.logits, key, value
            return getattr(result, output)

    # forward's parameters carry the input names (the front end names the ONNX inputs after them)
    scope: dict[str, Any] = {}
    exec(f"def forward(self, {', '.join(names)}):\n    return self.run({', '.join(names)})", scope)
    Outputs.forward = scope["forward"]
    return Outputs().eval()


def _hf_signal(model: Any) -> Any:
    import torch

    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0.0, 0.02)
    return model


# --------------------------------------------------------------------------- torchvision


def torchvision_models() -> list[ZooModel]:
    import torchvision

    made = []
    index = 0
    for task, module in (
        ("classification", torchvision.models),
        ("segmentation", torchvision.models.segmentation),
        ("detection", torchvision.models.detection),
        ("video", torchvision.models.video),
        ("optical_flow", torchvision.models.optical_flow),
    ):
        builders = sorted(set(torchvision.models.list_models(module=module)))
        for builder in builders:
            made.append(_torchvision_model(builder, task, index, torchvision.__version__))
            index += 1
    return made


TV_SHAPES = {
    "classification": [1, 3, 224, 224],
    "segmentation": [1, 3, 256, 256],
    "detection": [3, 320, 320],
    "video": [1, 3, 8, 112, 112],
    "optical_flow": [1, 3, 128, 128],
}


def _tv_shape(builder: str, task: str) -> list[int]:
    if builder.startswith("inception") or builder == "googlenet":
        return [1, 3, 299, 299]
    if builder.startswith("vit_h"):
        return [1, 3, 518, 518]
    if task == "video" and builder.startswith(("mvit", "swin3d")):
        return [1, 3, 16, 224, 224]
    if task == "video" and builder == "s3d":
        return [1, 3, 16, 112, 112]
    return TV_SHAPES[task]


def _torchvision_model(builder: str, task: str, index: int, version: str) -> ZooModel:
    import torch

    shape = _tv_shape(builder, task)
    about = f"torchvision {version.split('+')[0]} {builder} (random weights with signal)"
    name = f"tv_{builder}"
    if task == "detection":

        def inputs(batch: int) -> tuple[Any, ...]:
            return (torch.rand(*shape, generator=torch.Generator().manual_seed(0)),)

        return ZooModel(
            name,
            "torchvision",
            task,
            functools.partial(_tv_detector, builder),
            inputs,
            ["image"],
            ["boxes", "scores", "labels"],
            {"image": {1: "height", 2: "width"}},
            [("torchscript", 11 + index % 7)],
            about,
        )
    if task == "optical_flow":

        def flow_inputs(batch: int) -> tuple[Any, ...]:
            image = torch.rand(batch, *shape[1:], generator=torch.Generator().manual_seed(0))
            return image, image.flip(-1)

        return ZooModel(
            name,
            "torchvision",
            task,
            functools.partial(_tv_flow, builder),
            flow_inputs,
            ["image1", "image2"],
            ["flow"],
            {"image1": {0: "batch"}, "image2": {0: "batch"}},
            spread(index),
            about,
        )
    model = _image_model(
        name,
        "torchvision",
        task,
        functools.partial(_tv_plain, builder, task, shape),
        shape,
        index,
        about=about,
    )
    if task == "segmentation":
        model.dynamic = {"input": {0: "batch", 2: "height", 3: "width"}}
    return model


def _tv_builder(builder: str) -> Any:
    import torchvision

    kwargs: dict[str, Any] = {"weights": None}
    if builder in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    if builder.startswith(
        ("fcn", "deeplab", "lraspp", "fasterrcnn", "maskrcnn", "keypointrcnn", "retinanet", "fcos", "ssd")
    ):
        kwargs["weights_backbone"] = None
    return torchvision.models.get_model(builder, **kwargs)


def _tv_plain(builder: str, task: str, shape: list[int]) -> Any:
    import torch

    model = with_signal(_tv_builder(builder), shape)
    if task != "segmentation":
        return model

    class Out(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: Any) -> Any:
            return self.model(x)["out"]

    return Out().eval()


def _tv_detector(builder: str) -> Any:
    import torch

    model = _tv_builder(builder).eval()
    with torch.no_grad():  # spread weights so that scores are not all tied (see benchmarks/corpus.py)
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)

    class First(torch.nn.Module):
        """One CHW image in, the first image's detections out, as users export detectors."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, image: Any) -> Any:
            found = self.model([image])[0]
            return found["boxes"], found["scores"], found["labels"]

    return First().eval()


def _tv_flow(builder: str) -> Any:
    import torch

    model = _tv_builder(builder).eval()

    class Last(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, a: Any, b: Any) -> Any:
            return self.model(a, b, num_flow_updates=4)[-1]

    return Last().eval()


# --------------------------------------------------------------------------- all

# Families or exporters the zoo cannot make here, with why (paddle2onnx, which pins an older onnx than
# deploycc's, runs in an environment of its own: more_families.paddle_models)
NOT_MADE: dict[str, str] = {}


def _more(function: str) -> Callable[[], list[ZooModel]]:
    """A family of more_families.py, imported when asked for."""

    def models() -> list[ZooModel]:
        import more_families

        return getattr(more_families, function)()

    return models


FAMILIES: dict[str, Callable[[], list[ZooModel]]] = {
    "timm": timm_models,
    "transformers": transformers_models,
    "torchvision": torchvision_models,
    "ultralytics": _more("yolo_models"),
    "segmentation-models-pytorch": _more("smp_models"),
    "trees": _more("tree_models"),
    "keras": _more("keras_models"),
    "open_clip": _more("open_clip_models"),
    "paddle": _more("paddle_models"),
}
PREFIXES = {"timm_": "timm", "hf_": "transformers", "tv_": "torchvision", "yolo_": "ultralytics",
            "smp_": "segmentation-models-pytorch", "lgb_": "trees", "xgb_": "trees",
            "keras_": "keras", "clip_": "open_clip", "pd_": "paddle"}


@functools.cache
def family(name: str) -> dict[str, ZooModel]:
    return {model.name: model for model in FAMILIES[name]()}


def catalog(families: tuple[str, ...] = tuple(FAMILIES)) -> dict[str, ZooModel]:
    return {name: model for each in families for name, model in family(each).items()}


def lookup(name: str) -> ZooModel | None:
    """One model by name, importing only its own family's library."""
    prefix = next((p for p in PREFIXES if name.startswith(p)), None)
    return family(PREFIXES[prefix]).get(name) if prefix else None
