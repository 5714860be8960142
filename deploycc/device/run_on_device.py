"""Build, verify and time a deploycc device bundle on the board, with the board's own Python.

Copied into every TensorRT bundle as `run_on_device.py`. It runs on Python 3.6 through 3.12
with only the standard library, numpy (JetPack's own 1.13 or newer), the `tensorrt` bindings
JetPack installs, and pycuda for device memory (libcudart through ctypes where pycuda is absent).
TensorRT 8.2 through 10.x is told apart by what its API has, never by version strings.

    python3 run_on_device.py [BUNDLE] [--engine tensorrt|onnxruntime|onnxruntime-gpu] [--iterations N]

`--engine onnxruntime` runs the same path (read the bundle, load, feed the reference inputs,
verify every output, time, measure memory, write result.json) with ONNX Runtime standing in for
the engine: useful on any host, and how deploycc's own tests exercise this file. An ort-cuda or
ort-trt bundle's engine is `onnxruntime-gpu` (its providers.json, through `ort_gpu_session`);
without --engine the runner takes the bundle's own.
Exit code 0 when the outputs match the reference, 1 when they do not or a stage failed, 2 when
the bundle itself is unreadable. The result is written to BUNDLE/result.json either way, checked
first against its schema (RESULT_SCHEMA, which the host reads it by).
"""

import argparse
import hashlib
import json
import os
import platform
import sys
import time

BUNDLE_SCHEMA = 1  # the newest bundle.json this runner reads (backends/tensorrt/bundle.py writes it)
REFERENCE_DIR = "reference"
INDEX = "reference.json"

# result.json is the contract with the host, which reads it (deploycc/records/device.py) and refuses
# a newer schema; check_result holds each result to it before it is written. This file cannot
# import deploycc, so its side is spelled here; tests/backends/test_device_runner.py holds the
# two spellings equal.
RESULT_SCHEMA = 1
VERIFIED, FAILED = "verified-on-device", "failed-on-device"
STAGES = ("read", "build", "run", "verify", "bench", "done")
RESULT_KEYS = ("schema", "engine", "status", "stage")  # and model_sha256 once the model was read


def check_result(result):
    """What breaks the result's schema (an empty list: nothing)."""
    problems = ["no {}".format(key) for key in RESULT_KEYS if key not in result]
    if result.get("schema") != RESULT_SCHEMA:
        problems.append("schema {!r}, not {}".format(result.get("schema"), RESULT_SCHEMA))
    if result.get("status") not in (VERIFIED, FAILED):
        problems.append("status {!r}".format(result.get("status")))
    if result.get("stage") not in STAGES:
        problems.append("stage {!r}".format(result.get("stage")))
    if result.get("status") == VERIFIED and result.get("stage") != "done":
        problems.append("verified at stage {!r}, not done".format(result.get("stage")))
    if "model_sha256" not in result and result.get("stage") != "read":
        problems.append("no model_sha256 past the read stage")
    return problems


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def load_arrays(folder, entries):
    """The raw little-endian binaries of the index, as numpy arrays, each checked by sha256."""
    import numpy as np

    arrays = {}
    for entry in entries:
        path = os.path.join(folder, entry["file"])
        if sha256_of(path) != entry["sha256"]:
            raise ValueError("{}: sha256 does not match the index".format(entry["file"]))
        dtype = np.dtype(entry["dtype"]).newbyteorder("<")
        arrays[entry["name"]] = np.fromfile(path, dtype=dtype).reshape(entry["shape"])
    return arrays


def compare(name, expected, actual, atol, rtol, min_cosine, mismatch_share=0.0):
    """deploycc's comparison, copied (the board has no deploycc; a test keeps the two agreeing):
    every element within atol + rtol * |expected|, and the output pointing the reference's way
    (cosine), NaN and inf matching themselves."""
    import numpy as np

    expected, actual = np.asarray(expected), np.asarray(actual)
    row = {"name": name, "shape": list(expected.shape), "dtype": str(expected.dtype)}
    if expected.shape != actual.shape:
        row.update(passed=False, problem=f"shape {list(actual.shape)} != {list(expected.shape)}")
        return row
    if expected.dtype == np.bool_ or not np.issubdtype(expected.dtype, np.number):
        wrong = int((expected != actual).sum())
        row.update(passed=wrong == 0, mismatched=wrong, max_abs_error=float(wrong > 0),
                   cosine=1.0 if not wrong else 0.0)
        return row
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    settled = (np.isnan(e) & np.isnan(a)) | (np.isinf(e) & (e == a))
    diff = np.where(settled, 0.0, np.abs(a - e))
    diff = np.where(np.isnan(diff), np.inf, diff)
    magnitude = np.abs(np.where(settled, 1.0, e))
    bad = diff > atol + rtol * magnitude
    finite = ~np.isnan(e) & ~np.isnan(a) & ~np.isinf(e) & ~np.isinf(a)
    ef, af = e[finite], a[finite]
    norms = float(np.linalg.norm(ef) * np.linalg.norm(af))
    cosine = float(np.dot(ef.ravel(), af.ravel()) / norms) if norms > 0 else \
        (1.0 if np.array_equal(ef, af) else 0.0)
    negligible = ef.size == 0 or float(np.max(np.abs(ef))) <= atol
    mismatched = int(bad.sum())
    row.update(passed=mismatched <= mismatch_share * e.size and (cosine >= min_cosine or negligible),
               mismatched=mismatched,
               max_abs_error=float(diff.max()) if diff.size else 0.0, cosine=cosine)
    if not row["passed"]:
        row["problem"] = (f"{mismatched} of {int(e.size)} elements beyond atol {atol} + rtol {rtol}, "
                          f"cosine {cosine:.6f}")
    return row


# --------------------------------------------------------------------------- engines


ORT_TYPES = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32",
             "tensor(double)": "float64", "tensor(float16)": "float16", "tensor(bool)": "bool"}


class OrtEngine:
    """ONNX Runtime on the bundle's ONNX model: the same path, with ORT standing in for TensorRT."""

    name = "onnxruntime"

    def __init__(self, bundle, settings):
        import onnxruntime as ort

        self.version = ort.__version__
        self.session = ort.InferenceSession(os.path.join(bundle, "model.onnx"),
                                            providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]
        # The reference holds what the engine binding takes (INT64 as INT32 before TensorRT 10):
        # give ONNX Runtime what the model declares, as TensorRT's importer does.
        self.types = {i.name: ORT_TYPES.get(i.type) for i in self.session.get_inputs()}
        if settings.get("fp32_layers"):
            self.fp32_layers = {"asked": list(settings["fp32_layers"]),
                                "note": "ONNX Runtime stands in for the engine and computes all in fp32"}

    def run(self, feeds):
        feeds = {name: array.astype(self.types[name]) if self.types.get(name) else array
                 for name, array in feeds.items()}
        return dict(zip(self.outputs, self.session.run(None, feeds)))


def layer_nodes(name, metadata, wanted):
    """The ONNX node (of `wanted`) a TensorRT network layer came from, or None. The ONNX parser
    names a node's layer after the node, a second layer of the same node NAME_1, NAME_2... (its
    unique-name counter), and from TensorRT 10 it also writes "[ONNX Layer: NAME]" into the
    layer's metadata; a layer it made on its own is "(Unnamed Layer* N) [Type]"."""
    if name in wanted:
        return name
    if metadata:
        for node in wanted:
            if "[ONNX Layer: {}]".format(node) in metadata:
                return node
    base, _, counter = name.rpartition("_")
    if base in wanted and counter.isdigit():
        return base
    return None


def pin_fp32(network, trt, wanted):
    """Keep the layers of the ONNX nodes in `wanted` in fp32 (their precision and their float
    outputs' type); returns {node: [layer names]} and the nodes no layer came from."""
    wanted = set(wanted)
    pinned = {}  # type: dict
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        node = layer_nodes(layer.name, getattr(layer, "metadata", ""), wanted)
        if node is None:
            continue
        floating = [k for k in range(layer.num_outputs)
                    if layer.get_output(k).dtype in (trt.float32, trt.float16)]
        if not floating:
            continue  # a shape or index layer: no precision to keep
        layer.precision = trt.float32
        for k in floating:
            layer.set_output_type(k, trt.float32)
        pinned.setdefault(node, []).append(layer.name)
    return pinned, sorted(wanted - set(pinned))


def obey_precision(config, trt):
    """The builder flag that makes per-layer precision binding: OBEY_PRECISION_CONSTRAINTS from
    TensorRT 8.2, STRICT_TYPES before (its name for the same)."""
    flag = getattr(trt.BuilderFlag, "OBEY_PRECISION_CONSTRAINTS", None) or \
        getattr(trt.BuilderFlag, "STRICT_TYPES", None)
    if flag is not None:
        config.set_flag(flag)
    return flag is not None


def layer_precision(layer):
    """The precision of an engine layer from the engine inspector's detailed JSON: its first
    output's "Format/Datatype" ("Row major linear FP32", "Channel major FP16 format ...", or a
    bare "Half", "Float", "BFloat16" from Myelin), read as trex reads it."""
    outputs = layer.get("Outputs") or []
    text = str(outputs[0].get("Format/Datatype", "")) if outputs and isinstance(outputs[0], dict) else ""
    for token, precision in (("BF16", "bf16"), ("BFloat16", "bf16"), ("FP32", "fp32"), ("Float", "fp32"),
                             ("FP16", "fp16"), ("Half", "fp16"), ("Int8", "int8"), ("INT8", "int8"),
                             ("Int32", "int32")):
        if token in text:
            return precision
    return None


def _names_node(text, node):
    """Whether `node` appears in a layer name as a whole name ("a + b", "PWN(a, b)")."""
    at = text.find(node)
    while at >= 0:
        before = text[at - 1] if at > 0 else " "
        after = text[at + len(node)] if at + len(node) < len(text) else " "
        if not (before.isalnum() or before in "_/.") and not (after.isalnum() or after in "_/."):
            return True
        at = text.find(node, at + 1)
    return False


def engine_precisions(layers, wanted):
    """{node: the precision the engine gave it} for the ONNX nodes in `wanted`, read from the
    inspector's layers: by the "[ONNX Layer: NAME]" metadata (8.6+), else by name, a fused
    layer's name joining its parts ("a + b", "PWN(a, b)"). Reformat layers name the layer they
    feed, and a Myelin region ("{ForeignNode[a...b]}") only its first and last layer: neither
    says what a node inside got, so such a node is left out (reported as not found)."""
    found = {}
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        name = str(layer.get("Name", "")).replace("\x1e", "+").replace("\x1f", "+")
        if layer.get("LayerType") == "Reformat" or layer.get("Origin") == "REFORMAT" or \
                name.startswith("Reformatting CopyNode") or name.startswith("{ForeignNode["):
            continue
        metadata = str(layer.get("Metadata", ""))
        precision = layer_precision(layer) or "unknown"
        for node in wanted:
            if node not in found and ("[ONNX Layer: {}]".format(node) in metadata or _names_node(name, node)):
                found[node] = precision
    return found


def inspect_engine(engine, trt, wanted):
    """What the engine inspector (TensorRT 8.2+) says each kept layer got, or None where there
    is no inspector."""
    if not wanted or not hasattr(engine, "create_engine_inspector"):
        return None
    try:
        inspector = engine.create_engine_inspector()
        info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    except Exception:  # an engine built without detailed verbosity, an older layout
        return None
    layers = info.get("Layers", []) if isinstance(info, dict) else []
    found = engine_precisions(layers, wanted)
    return {"engine": found, "not_found": sorted(set(wanted) - set(found))}


def _gpu_sm():
    """GPU 0's compute capability as "sm86", through NVML; "sm-unknown" without it."""
    try:
        import pynvml

        pynvml.nvmlInit()
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(0))
        return "sm{}{}".format(major, minor)
    except Exception:
        return "sm-unknown"


def _tensorrt_version():
    try:
        import tensorrt

        return tensorrt.__version__
    except Exception:
        return "unknown"


def ort_gpu_session(bundle, profiling=False):
    """The ONNX Runtime session a bundle's providers.json describes: the one call that loads a
    deploycc build for onnxruntime-gpu. The TensorRT provider's caches go to a folder keyed by the
    model, the TensorRT version, the GPU's SM and the profiles, so another GPU or an upgrade never
    reads a stale engine. A provider this onnxruntime lacks is left out (returned in `missing`):
    the CPU build runs the same model, its GPU options unread. Returns (session, missing)."""
    import onnxruntime as ort

    document = read_json(os.path.join(bundle, "providers.json"))
    available = set(ort.get_available_providers())
    key = "{}-trt{}-{}-{}".format(document["model_sha256"][:12], _tensorrt_version(), _gpu_sm(),
                                  hashlib.sha256(json.dumps(document.get("profiles", []), sort_keys=True)
                                                 .encode()).hexdigest()[:8])
    providers, missing = [], []
    for name, options in document["providers"]:
        if name not in available:
            missing.append(name)
            continue
        options = dict(options)
        for option in ("trt_engine_cache_path", "trt_timing_cache_path", "trt_ep_context_file_path"):
            if option in options:
                options[option] = os.path.join(bundle, options[option], key)
                if not os.path.isdir(options[option]):
                    os.makedirs(options[option])
        providers.append((name, {k: str(v) if isinstance(v, bool) else v for k, v in options.items()}))
    session_options = ort.SessionOptions()
    if profiling:
        session_options.enable_profiling = True
        session_options.profile_file_prefix = os.path.join(bundle, "ort-profile")
    session = ort.InferenceSession(os.path.join(bundle, "model.onnx"), session_options, providers=providers)
    return session, missing


def placement_from_profile(events):
    """{provider: nodes} and {node: provider} from ONNX Runtime's profiling JSON: each node's
    kernel event ("cat": "Node", args.provider), once per node."""
    per_node = {}  # type: dict
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or "provider" not in args:
            continue
        name = str(event.get("name", ""))
        for suffix in ("_kernel_time", "_fence_before", "_fence_after"):
            if name.endswith(suffix):
                name = name[:-len(suffix)]
        per_node.setdefault(name, args["provider"])
    counts = {}  # type: dict
    for provider in per_node.values():
        counts[provider] = counts.get(provider, 0) + 1
    return counts, per_node


def placement_differences(predicted, measured):
    """The nodes ORT placed elsewhere than deploycc predicted: {node: "predicted -> measured"}.
    ORT's profile names a node by its ONNX name; nodes ORT fused or added (Memcpy) are left out."""
    primary, off = predicted["primary"], predicted.get("off_primary", {})
    differs = {}
    for node, provider in measured.items():
        if "Memcpy" in node:
            continue
        expected = off.get(node, primary)
        if provider != expected:
            differs[node] = "{} -> {}".format(expected, provider)
    return differs


class OrtGpuEngine(OrtEngine):
    """onnxruntime-gpu on a bundle's providers.json: the session deploycc's build describes, timed
    and verified as TensorRT's engine is, with where ORT placed each node read from its profiling."""

    name = "onnxruntime-gpu"

    def __init__(self, bundle, settings):
        import onnxruntime as ort

        started = time.perf_counter()
        self.version = ort.__version__
        self.bundle = bundle
        self.session, self.missing = ort_gpu_session(bundle, profiling=True)
        self.build_seconds = time.perf_counter() - started
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.types = {i.name: ORT_TYPES.get(i.type) for i in self.session.get_inputs()}
        self.profiled = False

    def run(self, feeds):
        outputs = OrtEngine.run(self, feeds)
        if not self.profiled:  # the first run's profile says where each node ran; later runs are timed
            self.profiled = True
            with open(self.session.end_profiling()) as handle:
                counts, per_node = placement_from_profile(json.load(handle))
            self.placement = {"counts": counts, "nodes": per_node, "missing_providers": self.missing}
            predicted_path = os.path.join(self.bundle, "placement-predicted.json")
            if os.path.exists(predicted_path):
                self.placement["differs"] = placement_differences(read_json(predicted_path), per_node)
        return outputs


class _CudaMemory:
    """Device buffers, copies and a stream: pycuda where it is installed, else libcudart."""

    def __init__(self):
        try:
            import pycuda.autoinit  # noqa: F401  (creates the context)
            import pycuda.driver as cuda

            self.cuda, self.via = cuda, "pycuda"
            self.stream = cuda.Stream()
        except ImportError:
            import ctypes
            import ctypes.util

            name = ctypes.util.find_library("cudart") or "libcudart.so"
            self.lib, self.via, self.cuda = ctypes.CDLL(name), "libcudart", None
            self.stream = ctypes.c_void_p()
            self._check(self.lib.cudaStreamCreate(ctypes.byref(self.stream)), "cudaStreamCreate")

    @staticmethod
    def _check(code, what):
        if code != 0:
            raise RuntimeError(f"{what} failed with CUDA error {code}")

    def alloc(self, nbytes):
        if self.cuda is not None:
            return self.cuda.mem_alloc(max(nbytes, 1))
        import ctypes

        pointer = ctypes.c_void_p()
        self._check(self.lib.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1))), "cudaMalloc")
        return pointer

    @staticmethod
    def address(buffer):
        return int(buffer) if not hasattr(buffer, "value") else int(buffer.value or 0)

    def free(self, buffer):
        if self.cuda is not None:
            buffer.free()
        else:
            self._check(self.lib.cudaFree(buffer), "cudaFree")

    def _copy(self, destination, source, nbytes, kind):
        """cudaMemcpyAsync; kind 1 is host to device, 2 device to host."""
        import ctypes

        self._check(self.lib.cudaMemcpyAsync(destination, source, ctypes.c_size_t(nbytes), kind, self.stream),
                    "cudaMemcpyAsync")

    def to_device(self, buffer, array):
        if self.cuda is not None:
            self.cuda.memcpy_htod_async(buffer, array, self.stream)
        else:
            import ctypes

            self._copy(buffer, array.ctypes.data_as(ctypes.c_void_p), array.nbytes, 1)

    def to_host(self, array, buffer):
        if self.cuda is not None:
            self.cuda.memcpy_dtoh_async(array, buffer, self.stream)
        else:
            import ctypes

            self._copy(array.ctypes.data_as(ctypes.c_void_p), buffer, array.nbytes, 2)

    def handle(self):
        return self.stream.handle if self.cuda is not None else self.stream.value

    def synchronize(self):
        if self.cuda is not None:
            self.stream.synchronize()
        else:
            self._check(self.lib.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")


def _release(version):
    """(major, minor) of a version string."""
    parts = [int(p) for p in str(version).split(".")[:2] if p.isdigit()]
    return tuple(parts + [0] * (2 - len(parts)))


def cache_calibrator(trt, cache):
    """An IInt8EntropyCalibrator2 that hands TensorRT the bundle's calibration cache and has no
    batches: TensorRT reads every tensor's scale from the cache and calibrates nothing."""

    class CacheCalibrator(trt.IInt8EntropyCalibrator2):  # type: ignore[name-defined]
        def __init__(self):
            trt.IInt8EntropyCalibrator2.__init__(self)

        def get_batch_size(self):
            return 1

        def get_batch(self, names):
            return None

        def read_calibration_cache(self):
            return cache

        def write_calibration_cache(self, cache_data):
            return None

    return CacheCalibrator()


# --------------------------------------------------------------------------- the builder's configuration
# The one place deploycc configures TensorRT's builder: the board's build here (TrtEngine) and the
# host's (deploycc/backends/tensorrt/engine.py imports these functions), so that an engine built on
# either side of the bundle gets the same flags for the same settings.

TIMING_CACHE = "timing.cache"  # in the bundle, shared with trtexec.sh (deploycc/device/bundle.py's)

# The builder flags of each precision deploycc builds TensorRT engines in. INT8 keeps FP16 on, so a
# layer without an INT8 kernel falls back to FP16 rather than FP32 (trtexec --int8 --fp16). INT4 is
# weight-only (its Q/DQ model's int4 DequantizeLinear weights, 10.0 on): GEMMs with fp16
# activations, the rest in FP16 (trtexec --int4 --fp16).
PRECISION_FLAGS = {"fp32": (), "fp16": ("FP16",), "bf16": ("BF16",), "int8": ("INT8", "FP16"),
                   "int4": ("INT4", "FP16")}
# The precisions whose half-precision analysis names the layers to keep in fp32
KEEPS_FP32_LAYERS = ("fp16", "bf16")


class BuildSettingsError(ValueError):
    """Settings the builder cannot take as they are: the host raises it again as a BackendError
    with its hint, this runner reports it as the build stage's reason."""

    def __init__(self, message, hint=None):
        ValueError.__init__(self, message)
        self.hint = hint


def network_flags(trt):
    """create_network's flags: explicit batch, a flag before TensorRT 10 and the only mode from 10
    (where the flag is deprecated and 0 is asked for)."""
    if int(trt.__version__.split(".")[0]) >= 10:
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)


def builder_flag(trt, name):
    """trt.BuilderFlag.<name>, or a BuildSettingsError naming the release that lacks it: BF16 came
    in TensorRT 9.0, INT4 in 10.0, and 11 builds strongly typed networks only (no FP16, BF16 or INT8 flag)."""
    flag = getattr(trt.BuilderFlag, name, None)
    if flag is None:
        raise BuildSettingsError("TensorRT {} has no {} builder flag".format(trt.__version__, name),
                                 hint="build for a target whose TensorRT release has it")
    return flag


def dynamic_inputs(network):
    """The names of the network inputs with a dynamic (-1) dim, in the network's order."""
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    return [tensor.name for tensor in inputs if any(d < 0 for d in tensor.shape)]


def configure_builder(trt, builder, network, settings, calibration_cache=None, timing_cache=None):
    """The IBuilderConfig of a build, from a bundle's settings (bundle.json's "settings"; the host
    passes the same dict, made by backends/tensorrt/bundle.py's settings()): precision, workspace_mb,
    profiles, dla_core, gpu_fallback, fp32_layers. `calibration_cache`: the bytes of an INT8
    calibration cache, for implicit quantization (None: the Q/DQ model's own scales);
    `timing_cache`: the bytes of a timing cache to start from (b"": a new one; None: none kept).
    Pins the kept layers in `network` too. Returns (config, what was done with the fp32 layers or
    None); raises BuildSettingsError for settings the builder cannot take."""
    config = builder.create_builder_config()
    workspace = (settings.get("workspace_mb") or 0) << 20
    if workspace:
        if hasattr(config, "set_memory_pool_limit"):  # 8.4 on; max_workspace_size is gone in 10
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
        else:
            config.max_workspace_size = workspace
    precision = str(settings.get("precision") or "fp32")
    if precision not in PRECISION_FLAGS:
        raise BuildSettingsError("deploycc builds TensorRT engines in {}, not {}".format(
            ", ".join(sorted(PRECISION_FLAGS)), precision))
    for name in PRECISION_FLAGS[precision]:
        config.set_flag(builder_flag(trt, name))
    kept = None
    wanted = settings.get("fp32_layers") or []
    if wanted and precision in KEEPS_FP32_LAYERS:
        pinned, unmatched = pin_fp32(network, trt, wanted)
        kept = {"asked": list(wanted), "pinned": pinned, "unmatched": unmatched,
                "obeyed": obey_precision(config, trt)}
    verbosity = getattr(getattr(trt, "ProfilingVerbosity", None), "DETAILED", None)  # 8.2 on
    if verbosity is not None:
        config.profiling_verbosity = verbosity  # the engine inspector's per-layer precisions
    if precision == "int8" and calibration_cache is not None:
        # implicit quantization (the DLA's): the scales deploycc computed, no calibration here
        config.int8_calibrator = cache_calibrator(trt, calibration_cache)
    dynamic = dynamic_inputs(network)
    if dynamic:
        given = dict((p["input"], p) for p in settings.get("profiles") or [])
        missing = [name for name in dynamic if name not in given]
        if missing:
            raise BuildSettingsError("dynamic inputs need an optimization profile: {}".format(
                ", ".join(sorted(missing))),
                hint="give --dynamic-batch MIN:OPT:MAX or --shape-range NAME:MIN:OPT:MAX")
        profile = builder.create_optimization_profile()
        # only the inputs the network leaves dynamic: a range given for one the legalized model
        # fixed would have to match its dims exactly, or the builder refuses the profile
        for name in dynamic:
            profile.set_shape(name, given[name]["min"], given[name]["opt"], given[name]["max"])
        config.add_optimization_profile(profile)
    if settings.get("dla_core") is not None:
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = int(settings["dla_core"])
        if settings.get("gpu_fallback", True):
            config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
    if timing_cache is not None and hasattr(config, "create_timing_cache"):  # 8.0 on
        cache = config.create_timing_cache(timing_cache) if timing_cache else None
        # one that cannot be read, or was timed on another GPU (ignore_mismatch=False), gives way to a
        # new one rather than lend its timings to this build
        if cache is None or not config.set_timing_cache(cache, ignore_mismatch=False):
            config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    return config, kept


def timing_cache_bytes(config):
    """The timing cache the build filled, serialized, to write back; None where there is none."""
    cache = config.get_timing_cache() if hasattr(config, "get_timing_cache") else None
    return None if cache is None else bytes(cache.serialize())


class TrtEngine:
    """A TensorRT engine built here from the bundle's ONNX model (or loaded from model.plan when
    it was built by this TensorRT on this device), driven through whichever API the installed
    TensorRT has: named tensors (8.5+) or bindings (8.2, 8.4)."""

    name = "tensorrt"

    def __init__(self, bundle, settings, form="explicit"):
        """form: "implicit" builds the fp32 model the bundle carries for it with the calibration
        cache (implicit INT8), the other form of an INT8 bundle for the GPU."""
        import tensorrt as trt

        self.trt, self.version, self.form = trt, trt.__version__, form
        if form == "implicit":
            implicit = settings["int8_implicit"]
            settings = dict(settings, model=implicit["model"], int8_calibration_cache=implicit["cache"])
        model_file = settings.get("model") or "model.onnx"
        wanted, have = _release(settings.get("tensorrt") or "0"), _release(trt.__version__)
        if have < wanted:
            raise RuntimeError("this board has TensorRT {}, the bundle was legalized for {} (the target's "
                               "table): rebuild the bundle for this JetPack".format(trt.__version__,
                                                                                     settings.get("tensorrt")))
        self.logger = trt.Logger(trt.Logger.WARNING)
        plan_path = os.path.join(bundle, "model.plan" if form == "explicit" else "model.implicit.plan")
        stamp_path = plan_path + ".stamp"
        model = sha256_of(os.path.join(bundle, model_file))
        stamp = "{}|{}|{}".format(trt.__version__, platform.node(), model)
        plan = None
        if os.path.exists(plan_path) and os.path.exists(stamp_path):
            with open(stamp_path) as handle:
                if handle.read() == stamp:
                    with open(plan_path, "rb") as plan_file:
                        plan = plan_file.read()
        started = time.perf_counter()
        if plan is None:
            plan = self._build(bundle, settings)
            with open(plan_path, "wb") as handle:
                handle.write(plan)
            with open(stamp_path, "w") as handle:
                handle.write(stamp)
        self.build_seconds = time.perf_counter() - started
        self.engine = trt.Runtime(self.logger).deserialize_cuda_engine(plan)
        if self.engine is None:
            raise RuntimeError("TensorRT could not deserialize the plan")
        self.context = self.engine.create_execution_context()
        kept = settings.get("fp32_layers") or []
        if kept:
            asked = getattr(self, "fp32_layers", None) or {"asked": list(kept), "note": "plan built earlier"}
            asked["inspector"] = inspect_engine(self.engine, trt, kept)
            self.fp32_layers = asked
        self.memory = _CudaMemory()
        self.named = hasattr(self.engine, "num_io_tensors")
        self.io = self._io()
        self.buffers = {}  # name -> (device buffer, its size): kept across runs, grown when needed

    def _build(self, bundle, settings):
        trt = self.trt
        builder = trt.Builder(self.logger)
        network = builder.create_network(network_flags(trt))
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse_from_file(os.path.join(bundle, settings.get("model") or "model.onnx")):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise RuntimeError("the ONNX parser refused the model: " + "; ".join(errors))
        calibration = None
        if settings.get("int8_calibration_cache"):
            with open(os.path.join(bundle, settings["int8_calibration_cache"]), "rb") as handle:
                calibration = handle.read()
        # the bundle's timing cache, which trtexec.sh and `deploycc build --engine-only` also use:
        # a rebuild here, and the INT8 bundle's second form, reuse the first build's timings
        timing_path = os.path.join(bundle, TIMING_CACHE)
        timing = b""
        if os.path.exists(timing_path):
            with open(timing_path, "rb") as handle:
                timing = handle.read()
        config, kept = configure_builder(trt, builder, network, settings, calibration, timing)
        if kept is not None:
            self.fp32_layers = kept
        if hasattr(builder, "build_serialized_network"):
            plan = builder.build_serialized_network(network, config)
        else:  # before 8.0
            engine = builder.build_engine(network, config)
            plan = engine.serialize() if engine is not None else None
        if plan is None:
            raise RuntimeError("TensorRT could not build the engine (see its log above)")
        filled = timing_cache_bytes(config)
        if filled:
            with open(timing_path, "wb") as handle:
                handle.write(filled)
        return bytes(plan)

    def _io(self):
        """(name, is_input, numpy dtype) of every engine I/O tensor."""
        trt, engine = self.trt, self.engine
        if self.named:
            names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
            return [(n, engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT,
                     trt.nptype(engine.get_tensor_dtype(n))) for n in names]
        return [(engine.get_binding_name(i), engine.binding_is_input(i),
                 trt.nptype(engine.get_binding_dtype(i))) for i in range(engine.num_bindings)]

    def _buffer(self, name, nbytes):
        """The device buffer of one tensor, reused from run to run (the timed loop allocates
        nothing) and reallocated only when a larger one is needed."""
        nbytes = max(nbytes, 1)  # an empty tensor (a decoder's cache before its prompt) needs an address too
        held = self.buffers.get(name)
        if held is None or held[1] < nbytes:
            if held is not None:
                self.memory.free(held[0])
            held = self.buffers[name] = (self.memory.alloc(nbytes), nbytes)
        return held[0]

    def run(self, feeds):
        import numpy as np

        io = self.io
        buffers, outputs = {}, {}
        for index, (name, is_input, dtype) in enumerate(io):
            if not is_input:
                continue
            array = np.ascontiguousarray(feeds[name].astype(dtype))
            if self.named:
                self.context.set_input_shape(name, array.shape)
            else:
                self.context.set_binding_shape(index, array.shape)
            buffers[name] = self._buffer(name, array.nbytes)
            self.memory.to_device(buffers[name], array)
        for index, (name, is_input, dtype) in enumerate(io):
            if is_input:
                continue
            shape = self.context.get_tensor_shape(name) if self.named else \
                self.context.get_binding_shape(index)
            outputs[name] = np.empty(tuple(shape), dtype=dtype)
            buffers[name] = self._buffer(name, outputs[name].nbytes)
        if self.named:
            for name, _, _ in io:
                self.context.set_tensor_address(name, self.memory.address(buffers[name]))
            ok = self.context.execute_async_v3(self.memory.handle())
        else:
            bindings = [self.memory.address(buffers[name]) for name, _, _ in io]
            ok = self.context.execute_async_v2(bindings, self.memory.handle())
        if not ok:
            raise RuntimeError("TensorRT failed to enqueue the inference")
        for name, array in outputs.items():
            self.memory.to_host(array, buffers[name])
        self.memory.synchronize()
        return outputs


ENGINES = {"tensorrt": TrtEngine, "onnxruntime": OrtEngine, "onnxruntime-gpu": OrtGpuEngine}  # type: dict


# --------------------------------------------------------------------------- measurements


def proc_kb(path, field):
    """A `Field:  N kB` line of a /proc file, as N; None where the file or the line is absent."""
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def peak_rss_kb():
    """The process's high-water mark (VmHWM), in kB; None off Linux."""
    return proc_kb("/proc/self/status", "VmHWM")


def nvmap_kb():
    """NvMapMemUsed from /proc/meminfo: the GPU memory a Jetson has handed out, in kB."""
    return proc_kb("/proc/meminfo", "NvMapMemUsed")


def start_tegrastats():
    """tegrastats sampling every 100 ms while the engine is timed (Jetson only); None elsewhere."""
    import shutil
    import subprocess

    path = shutil.which("tegrastats") or \
        ("/usr/bin/tegrastats" if os.path.exists("/usr/bin/tegrastats") else None)
    if path is None:
        return None
    try:
        return subprocess.Popen([path, "--interval", "100"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, universal_newlines=True)
    except OSError:
        return None


def stop_tegrastats(process):
    """The lines tegrastats printed (the last 600), raw: the host reads them (deploycc's parser
    knows the JetPack 4 and the JetPack 5/6 formats)."""
    if process is None:
        return None
    process.terminate()
    try:
        output, _ = process.communicate(timeout=5)
    except Exception:
        process.kill()
        return None
    return [line for line in output.splitlines() if line.strip()][-600:]


def nvml_sample():
    """GPU 0's used memory (kB) and power draw (mW) through NVML (nvidia-ml-py), on a discrete GPU;
    None where NVML is not there (a Jetson has no NVML: tegrastats covers it)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        sample = {"gpu_memory_used_kb": int(pynvml.nvmlDeviceGetMemoryInfo(handle).used) // 1024}  # type: dict
        try:
            sample["power_mw"] = int(pynvml.nvmlDeviceGetPowerUsage(handle))
        except Exception:  # not every board reports power
            sample["power_mw"] = None
        return sample
    except Exception:
        return None


def power_mode():
    """`nvpmodel -q`'s first line (the power mode, e.g. "NV Power Mode: MAXN"); None off Jetson."""
    import subprocess

    try:
        output = subprocess.check_output(["nvpmodel", "-q"], stderr=subprocess.DEVNULL,
                                         universal_newlines=True, timeout=10)
    except Exception:
        return None
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0] if lines else None


# devfreq nodes of the Jetson GPUs: Nano 57000000.gpu, TX2 17000000.gp10b, Xavier 17000000.gv11b,
# Orin 17000000.ga10b.
GPU_DEVFREQ = (".gpu", ".gp10b", ".gv11b", ".ga10b")


def read_number(path):
    try:
        with open(path) as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def clock_state(root="/sys"):
    """Whether the clocks are locked, as jetson_clocks leaves them: it raises every CPU's
    scaling_min_freq and the GPU's devfreq min_freq to their maxima. Read from sysfs, which needs
    no root (`jetson_clocks --show` does). None where a part is not found (off Jetson)."""
    import glob

    cpus = []
    for folder in sorted(glob.glob(os.path.join(root, "devices/system/cpu/cpu[0-9]*/cpufreq"))):
        low = read_number(os.path.join(folder, "scaling_min_freq"))
        high = read_number(os.path.join(folder, "scaling_max_freq"))
        if low is not None and high is not None:
            cpus.append(low == high)
    gpu = None
    gpu_mhz = None
    for folder in sorted(glob.glob(os.path.join(root, "class/devfreq/*"))):
        if not os.path.basename(folder).endswith(GPU_DEVFREQ):
            continue
        low = read_number(os.path.join(folder, "min_freq"))
        high = read_number(os.path.join(folder, "max_freq"))
        current = read_number(os.path.join(folder, "cur_freq"))
        if low is not None and high is not None:
            gpu = low == high
            gpu_mhz = None if current is None else round(current / 1e6, 1)
            break
    cpu = all(cpus) if cpus else None
    return {"cpu_locked": cpu, "gpu_locked": gpu, "gpu_mhz": gpu_mhz,
            "jetson_clocks": None if gpu is None else bool(gpu and cpu)}


def percentile(sorted_values, share):
    index = min(len(sorted_values) - 1, max(0, int(round(share * (len(sorted_values) - 1)))))
    return sorted_values[index]


def benchmark(engine, feeds, iterations, warmup_seconds):
    """Warm up for a while (clocks settle, lazy allocations happen), then time each run."""
    started = time.perf_counter()
    warmups = 0
    while time.perf_counter() - started < warmup_seconds or warmups < 3:
        engine.run(feeds)
        warmups += 1
    times = []
    for _ in range(iterations):
        tick = time.perf_counter()
        engine.run(feeds)
        times.append((time.perf_counter() - tick) * 1e3)
    ordered = sorted(times)
    mean = sum(times) / len(times)
    return {"iterations": len(times), "warmup_runs": warmups, "mean_ms": round(mean, 4),
            "p50_ms": round(percentile(ordered, 0.5), 4), "p90_ms": round(percentile(ordered, 0.9), 4),
            "p99_ms": round(percentile(ordered, 0.99), 4), "min_ms": round(ordered[0], 4),
            "throughput_per_s": round(1e3 / mean, 2) if mean > 0 else None}


def faster_int8_form(explicit, bundle, settings, inputs, result):
    """An INT8 bundle for the GPU carries both forms: the Q/DQ model (explicit) and the fp32 model
    with the calibration cache (implicit). Which is faster depends on the GPU and the TensorRT
    release, so both are built and timed here; the faster one is verified and benchmarked."""
    timings = {"explicit": benchmark(explicit, inputs, 30, 0.5)["p50_ms"]}
    try:
        implicit = TrtEngine(bundle, settings, form="implicit")
        timings["implicit"] = benchmark(implicit, inputs, 30, 0.5)["p50_ms"]
    except Exception as error:  # the explicit form stands; say why the other did not
        result["int8_forms"] = {"explicit_p50_ms": timings["explicit"], "chosen": "explicit",
                                "implicit_error": "{}: {}".format(type(error).__name__, str(error)[:200])}
        return explicit
    chosen = "implicit" if timings["implicit"] < timings["explicit"] else "explicit"
    result["int8_forms"] = {"explicit_p50_ms": timings["explicit"], "implicit_p50_ms": timings["implicit"],
                            "chosen": chosen}
    return implicit if chosen == "implicit" else explicit


# --------------------------------------------------------------------------- main


def run(bundle, engine_name, iterations, warmup_seconds):
    """The result (a dict for result.json) and the exit code."""
    result = {"schema": RESULT_SCHEMA, "engine": engine_name, "status": FAILED, "stage": "read",
              "python": platform.python_version(), "machine": platform.machine(), "host": platform.node()}
    try:
        settings, index, inputs, expected = read_bundle(bundle, result)
    except (OSError, ValueError, KeyError) as error:
        result["reason"] = f"unreadable bundle: {error}"
        return result, 2
    memory_before = nvmap_kb()
    try:
        engine, actual = build_and_run(bundle, engine_name, settings, inputs, result)
        result["stage"] = "verify"
        if not verified(index, expected, actual, result):
            return result, 1
        result["stage"] = "bench"
        time_engine(engine, inputs, iterations, warmup_seconds, result)
        if index.get("decoder"):
            result["generation"] = time_generation(engine, index["decoder"], inputs)
    except Exception as error:  # every failure on the board is a result, with its stage
        result["reason"] = "{}: {}".format(type(error).__name__, str(error).strip().splitlines()[0]
                                            if str(error).strip() else "")
        return result, 1
    after = nvmap_kb()
    result["memory"] = {"peak_rss_kb": peak_rss_kb(),
                        "nvmap_delta_kb": None if None in (after, memory_before) else after - memory_before}
    result["status"], result["stage"] = VERIFIED, "done"
    return result, 0


def read_bundle(bundle, result):
    """bundle.json's settings, the reference index, its inputs and expected outputs; the model's
    sha256 into `result`. Raises OSError, ValueError or KeyError on a bundle it cannot use."""
    document = read_json(os.path.join(bundle, "bundle.json"))
    if document.get("schema", 1) > BUNDLE_SCHEMA:
        raise ValueError("bundle.json schema {} is newer than this runner's {}".format(
            document.get("schema"), BUNDLE_SCHEMA))
    result["model_sha256"] = sha256_of(os.path.join(bundle, "model.onnx"))
    index = read_json(os.path.join(bundle, REFERENCE_DIR, INDEX))
    if index.get("model_sha256") != result["model_sha256"]:
        raise ValueError("the reference was made for another model (sha256 differs)")
    inputs = load_arrays(os.path.join(bundle, REFERENCE_DIR), index["inputs"])
    expected = load_arrays(os.path.join(bundle, REFERENCE_DIR), index["outputs"])
    return document["settings"], index, inputs, expected


def build_and_run(bundle, engine_name, settings, inputs, result):
    """The engine built from the bundle (TensorRT's implicit int8 in its faster form where asked)
    and its outputs on the reference inputs; what the build says goes into `result`."""
    result["stage"] = "build"
    engine = ENGINES[engine_name](bundle, settings)
    if engine_name == "tensorrt" and settings.get("int8_implicit"):
        engine = faster_int8_form(engine, bundle, settings, inputs, result)
    result["engine_version"] = engine.version
    result["build_seconds"] = round(getattr(engine, "build_seconds", 0.0), 3)
    if getattr(engine, "fp32_layers", None):
        result["fp32_layers"] = engine.fp32_layers
    result["stage"] = "run"
    actual = engine.run(inputs)
    if getattr(engine, "placement", None):
        result["placement"] = engine.placement
    return engine, actual


def verified(index, expected, actual, result):
    """Each output against the reference at the bundle's tolerances, the rows into `result`;
    whether all passed (else the first that did not is the reason)."""
    atol, rtol, min_cosine = (index["tolerances"][key] for key in ("atol", "rtol", "min_cosine"))
    share = index["tolerances"].get("mismatch_share", 0.0)
    rows = [compare(name, array, actual.get(name, array[:0]), atol, rtol, min_cosine, share)
            for name, array in expected.items()]
    result["outputs"] = rows
    result["tolerances"] = index["tolerances"]
    if all(row["passed"] for row in rows):
        return True
    first = next(row for row in rows if not row["passed"])
    result["reason"] = "output '{}': {}".format(first["name"], first.get("problem", "differs"))
    return False


def time_engine(engine, inputs, iterations, warmup_seconds, result):
    """Latency, with tegrastats and NVML sampled around it, and the board's power mode and clocks."""
    sampler = start_tegrastats()
    gpu_before = nvml_sample()
    try:
        result["latency"] = benchmark(engine, inputs, iterations, warmup_seconds)
    finally:
        result["tegrastats"] = stop_tegrastats(sampler)
    result["nvml"] = {"before": gpu_before, "after": nvml_sample()} if gpu_before else None
    result["power_mode"] = power_mode()
    result["clocks"] = clock_state()


GENERATION_STEPS = 32  # single-token steps after the prompt: what each generated token costs
GENERATION_PROMPTS = (128, 512, 2048)  # the prompt lengths `deploycc bench` times on the host too


def _step_feeds(decoder, inputs, tokens, past, past_length):
    """One generation step's inputs: the new tokens [1, n] after `past_length` cached ones, the mask
    over all of them, their positions, and the cache; each in the reference input's dtype."""
    import numpy as np

    feeds = {decoder["input_ids"]: tokens.astype(inputs[decoder["input_ids"]].dtype)}
    feeds.update(past)
    length = tokens.shape[1]
    if decoder.get("attention_mask"):
        feeds[decoder["attention_mask"]] = np.ones((1, past_length + length),
                                                   inputs[decoder["attention_mask"]].dtype)
    if decoder.get("position_ids"):
        feeds[decoder["position_ids"]] = np.arange(past_length, past_length + length).astype(
            inputs[decoder["position_ids"]].dtype)[None]
    return feeds


def _next_token(decoder, outputs):
    import numpy as np

    return np.array([[int(np.argmax(outputs[decoder["logits"]][0, -1]))]])


def time_generation(engine, decoder, inputs, lengths=GENERATION_PROMPTS, steps=GENERATION_STEPS):
    """A decoder's generation on the engine at each prompt length (the reference's first row of ids,
    repeated to the length), as `deploycc bench` times it on the host: {"prompts": [one timing per
    length]}. A length the engine or the model refuses (past its positions, or its profile) is that
    entry's `error`, and the longer ones are not tried."""
    import numpy as np

    row = np.ascontiguousarray(inputs[decoder["input_ids"]][:1])
    timings = []
    for length in lengths:
        prompt = np.resize(row, (1, length)).astype(row.dtype)
        timings.append(_time_prompt(engine, decoder, inputs, prompt, steps))
        if "error" in timings[-1]:
            break
    return {"prompts": timings}


def _time_prompt(engine, decoder, inputs, prompt, steps):
    """Time to first token on `prompt` (the cache empty), then `steps` single-token steps feeding
    each present back as the next past; decode tokens/s, the cache's bytes at the end and their
    share of the board's memory, and tokens/s per watt where NVML reads the power (tegrastats' lines,
    taken meanwhile, go to the host, which reads the rails). A step the engine refuses is `error`,
    with what was measured before it."""
    import numpy as np

    past = {}
    for entry in decoder["cache"]:
        shape = list(inputs[entry["past"]].shape)
        shape[0], shape[entry["axis"]] = 1, 0
        past[entry["past"]] = np.zeros(shape, inputs[entry["past"]].dtype)
    timing = {"prompt_tokens": int(prompt.shape[1]), "decode_steps": 0}  # type: dict
    power = []
    sampler = start_tegrastats()
    try:
        tick = time.perf_counter()
        outputs = engine.run(_step_feeds(decoder, inputs, prompt, past, 0))
        timing["time_to_first_token_ms"] = round((time.perf_counter() - tick) * 1e3, 3)
        length, token = int(prompt.shape[1]), _next_token(decoder, outputs)
        tick = time.perf_counter()
        for step in range(steps):
            past = {entry["past"]: outputs[entry["present"]] for entry in decoder["cache"]}
            outputs = engine.run(_step_feeds(decoder, inputs, token, past, length))
            length, token = length + 1, _next_token(decoder, outputs)
            timing["decode_steps"] = step + 1
            sample = nvml_sample() if step % 4 == 0 else None
            if sample and sample.get("power_mw") is not None:
                power.append(sample["power_mw"])
        seconds = time.perf_counter() - tick
        timing["decode_tokens_per_s"] = round(steps / seconds, 3) if seconds > 0 else None
        cache = sum(int(outputs[entry["present"]].nbytes) for entry in decoder["cache"])
        timing["kv_cache_bytes"], timing["context_tokens"] = cache, length
        total = proc_kb("/proc/meminfo", "MemTotal")
        timing["memory_total_kb"] = total
        timing["kv_cache_share_of_memory"] = round(cache / (total * 1024.0), 6) if total else None
    except Exception as error:  # the engine refused a step (a profile too narrow): said, not fatal
        timing["error"] = "{}: {}".format(type(error).__name__, str(error).strip().splitlines()[0][:200]
                                          if str(error).strip() else "")
    finally:
        timing["tegrastats"] = stop_tegrastats(sampler)
    if power:
        timing["power_mean_mw"] = round(sum(power) / float(len(power)), 1)
        if timing.get("decode_tokens_per_s"):
            timing["tokens_per_s_per_watt"] = round(timing["decode_tokens_per_s"] * 1000.0
                                                    / timing["power_mean_mw"], 4)
    return timing


def bundle_engine(bundle):
    """The engine a bundle is built for: bundle.json's "engine" (onnxruntime-gpu for an ort-cuda or
    ort-trt bundle), TensorRT where it names none (a TensorRT bundle) or cannot be read."""
    try:
        return str(read_json(os.path.join(bundle, "bundle.json")).get("engine") or "tensorrt")
    except (OSError, ValueError, AttributeError):
        return "tensorrt"


def main(argv=None):
    parser = argparse.ArgumentParser(description="Build, verify and time a deploycc bundle on this device.")
    parser.add_argument("bundle", nargs="?", default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--engine", choices=sorted(ENGINES), default=None,
                        help="default: the bundle's own (bundle.json's engine; TensorRT)")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--out", help="where to write the result (default BUNDLE/result.json)")
    args = parser.parse_args(argv)
    result, code = run(args.bundle, args.engine or bundle_engine(args.bundle), max(1, args.iterations),
                       args.warmup_s)
    broken = check_result(result)
    if broken:  # a bug here: better no result than one the host would misread
        sys.stderr.write("run_on_device.py: the result breaks its schema ({}); nothing written\n".format(
            "; ".join(broken)))
        return 2
    out = args.out or os.path.join(args.bundle, "result.json")
    partial = out + ".partial"
    with open(partial, "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
    os.replace(partial, out)  # whole or absent, never truncated
    line = "{}: {} (stage {})".format(result["status"], result.get("reason", "outputs match the reference"),
                                      result["stage"])
    (sys.stdout if code == 0 else sys.stderr).write(line + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
