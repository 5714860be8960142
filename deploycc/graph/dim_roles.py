"""What each dynamic input dim of a model stands for (a batch, an image's height or width, video
frames, a text sequence, audio samples) and the size it typically takes, read from the model
alone: the dim's name, the input's layout and dtype, its static sibling dims, the model's
metadata, and what the graph does with the input (an RNN's initial state carries the batch).

The sizes are where verification draws its inputs, `bench` times, and a TensorRT profile puts its
`opt`; when the model refuses them, the role's fallbacks are tried in turn. Documented defaults
(README, "Shapes"):

    role      typical   fallbacks            why
    batch     policy    -                    the target's shape policy decides (Jetson: 1)
    height    224       640, 48, 32          ImageNet crops; detectors; text lines (PP-OCR: 48)
    width     224       640, 320, 32         ... a text line is wide (PP-OCR's recognizer: 48x320)
    frames    16        8, 32                video clips (torchvision's video models)
    sequence  128       64, 16, 512          tokens; a small config may hold fewer positions
    samples   16000     512, 576, 1024       one second of 16 kHz audio; streaming VADs take chunks
    other     32        2, 16, 128, 512      nothing says: the old ladder of verification sizes
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploycc.graph.graphs import dims_of

if TYPE_CHECKING:
    import onnx_ir as ir

BATCH, HEIGHT, WIDTH, FRAMES, SEQUENCE, SAMPLES, OTHER = (
    "batch", "height", "width", "frames", "sequence", "samples", "other")
# role -> (typical size, fallbacks in the order they are tried)
ROLE_SIZES: dict[str, tuple[int, tuple[int, ...]]] = {
    BATCH: (1, ()),
    HEIGHT: (224, (640, 48, 32)),
    WIDTH: (224, (640, 320, 32)),
    FRAMES: (16, (8, 32)),
    SEQUENCE: (128, (64, 16, 512)),
    SAMPLES: (16000, (512, 576, 1024)),
    OTHER: (32, (2, 16, 128, 512)),
}
SPATIAL = (HEIGHT, WIDTH)
CHANNELS = (1, 2, 3, 4)  # a static dim of this size beside two dynamic ones is an image's channels

# A dim's own name says what it is. Exporters name dims after what the user called them
# ("batch", "height"), or after nothing ("unk__214", "p2o.DynamicDimension.1", "?").
_NAMED_ROLES = (
    (BATCH, re.compile(r"^(n|b|bs|batch|batch_?size|.*_batch|batch_.*|num_images)$")),
    (HEIGHT, re.compile(r"^(h|height|.*_h|.*height.*|rows)$")),
    (WIDTH, re.compile(r"^(w|width|.*_w|.*width.*|cols)$")),
    (FRAMES, re.compile(r"^(t|frames?|num_frames|clip_len|.*frame.*)$")),
    (SAMPLES, re.compile(r".*(samples?|audio|wav|waveform|signal).*")),
    (SEQUENCE, re.compile(r".*(seq|sequence|token|len|length|sentence|text|step|position|time).*")),
)
# Metadata keys exporters write an input size under (ultralytics: imgsz "[640, 640]").
_IMAGE_SIZE_KEYS = ("imgsz", "img_size", "image_size", "input_size", "input_shape", "image_shape")
_SAMPLE_RATE_KEYS = ("sample_rate", "sampling_rate", "sr")
_RNN_OPS = ("LSTM", "GRU", "RNN")
_RNN_STATE_INDICES = (5, 6)  # initial_h, and LSTM's initial_c


@dataclass(frozen=True)
class DimGuess:
    """One dynamic dim of one input: what it stands for and the sizes to draw it at."""

    input: str
    axis: int
    name: str  # its symbolic name, "?" when unnamed
    role: str
    typical: int
    fallbacks: tuple[int, ...]
    source: str  # why this role and size, for the reports

    def size(self, attempt: int) -> int:
        """The size at a given attempt: 0 the typical one, then each fallback, then the last."""
        sizes = (self.typical, *self.fallbacks)
        return sizes[min(attempt, len(sizes) - 1)]

    @property
    def attempts(self) -> int:
        return 1 + len(self.fallbacks)


def _role_from_name(name: str) -> str | None:
    lowered = name.lower()
    if lowered in ("?", "") or lowered.startswith(("unk__", "p2o.", "dynamicdimension", "dim_")) \
            or re.fullmatch(r"(s\d+|\d+|-1)", lowered):
        return None  # an exporter's invented name says nothing
    for role, pattern in _NAMED_ROLES:
        if pattern.fullmatch(lowered):
            return role
    return None


def _roles_from_layout(value: ir.Value, dims: list[int | str]) -> dict[int, str]:
    """Roles for dims whose names say nothing, from the input's rank, dtype and static dims."""
    import onnx_ir as ir

    rank = len(dims)
    static = {i: d for i, d in enumerate(dims) if isinstance(d, int)}
    integer = value.dtype is not None and value.dtype in (ir.DataType.INT64, ir.DataType.INT32)
    floating = value.dtype is not None and value.dtype.is_floating_point()
    roles: dict[int, str] = {}
    if rank == 4 and static.get(1) in CHANNELS:  # NCHW
        roles = {2: HEIGHT, 3: WIDTH}
    elif rank == 4 and static.get(3) in CHANNELS:  # NHWC
        roles = {1: HEIGHT, 2: WIDTH}
    elif rank == 3 and static.get(0) in (1, 3) and 1 not in static and 2 not in static:  # CHW (detectors)
        roles = {1: HEIGHT, 2: WIDTH}
    elif rank == 5 and static.get(1) in CHANNELS:  # NCTHW (video)
        roles = {2: FRAMES, 3: HEIGHT, 4: WIDTH}
    elif rank == 2 and integer:  # token ids, masks, segment ids
        roles = {1: SEQUENCE}
    elif rank == 2 and floating:  # a waveform
        roles = {1: SAMPLES}
    elif rank == 3 and floating and 2 in static:  # (batch, sequence, features)
        roles = {1: SEQUENCE}
    return roles


def _rnn_roles(graph: ir.Graph) -> dict[tuple[str, int], str]:
    """Roles an RNN gives the graph inputs it reads directly: ONNX's LSTM/GRU/RNN take X as
    [sequence, batch, features] and their initial states as [directions, batch, hidden] (layout 0),
    or batch first (layout 1). Read before names: an exporter's "T" is the sequence here."""
    from deploycc.graph.graphs import all_nodes

    inputs = {id(v): v.name or "" for v in graph.inputs}
    roles: dict[tuple[str, int], str] = {}
    for node in all_nodes(graph):
        if node.op_type not in _RNN_OPS:
            continue
        layout = node.attributes.get("layout")
        batch_first = layout is not None and int(layout.value) == 1
        for index, value in enumerate(node.inputs):
            name = inputs.get(id(value)) if value is not None else None
            if name is None:
                continue
            if index == 0:
                roles[(name, 0)], roles[(name, 1)] = (BATCH, SEQUENCE) if batch_first else (SEQUENCE, BATCH)
            elif index in _RNN_STATE_INDICES:
                roles[(name, 0 if batch_first else 1)] = BATCH
    return roles


def _cache_roles(graph: ir.Graph) -> dict[tuple[str, int], str]:
    """A KV-cache decoder's past inputs: the axis that grows is a length of tokens (unnamed, a
    [batch, 2, ?, 64] cache looks like an image)."""
    from deploycc.graph.decoder import decoder_signature

    signature = decoder_signature(graph)
    if signature is None:
        return {}
    return {(entry.past, entry.axis): SEQUENCE for entry in signature.cache}


def _attention_head_sizes(graph: ir.Graph) -> dict[tuple[str, int], int]:
    """The head size of each cache input ONNX Runtime's fused GroupQueryAttention reads (as
    onnxruntime-genai's model builder writes decoders, the cache's last dim symbolic: drawn as an image
    width, 224, the attention refused it): the packed q/k/v projection's width over the heads it holds."""
    from deploycc.graph.graphs import all_nodes

    inputs = {id(v): v.name or "" for v in graph.inputs}
    sizes: dict[tuple[str, int], int] = {}
    for node in all_nodes(graph):
        if node.op_type != "GroupQueryAttention" or len(node.inputs) < 5 or node.inputs[0] is None:
            continue
        heads, kv_heads = (node.attributes.get(name) for name in ("num_heads", "kv_num_heads"))
        producer = node.inputs[0].producer()
        width = producer.attributes.get("N") if producer is not None and producer.op_type == "MatMulNBits" \
            else None
        if heads is None or kv_heads is None or width is None:
            continue
        packed = len(node.inputs) < 2 or node.inputs[1] is None  # q, k and v in one input
        total = int(heads.value) + (2 * int(kv_heads.value) if packed else 0)
        for cache in node.inputs[3:5]:
            if cache is not None and id(cache) in inputs:
                sizes[(inputs[id(cache)], 3)] = int(width.value) // total
    return sizes


def _has_rnn(graph: ir.Graph) -> bool:
    from deploycc.graph.graphs import all_nodes

    return any(node.op_type in _RNN_OPS for node in all_nodes(graph))


def _ints(text: str) -> list[int]:
    return [int(token) for token in re.findall(r"\d+", text)]


def _metadata_image_size(metadata: Mapping[str, str]) -> tuple[int, int] | None:
    for key in _IMAGE_SIZE_KEYS:
        if key in metadata:
            numbers = [n for n in _ints(metadata[key]) if n > 4]  # drop channel and batch counts
            if len(numbers) == 1:
                return numbers[0], numbers[0]
            if len(numbers) >= 2:
                return numbers[-2], numbers[-1]
    return None


def _metadata_sample_rate(metadata: Mapping[str, str]) -> int | None:
    for key in _SAMPLE_RATE_KEYS:
        numbers = _ints(metadata.get(key, ""))
        if numbers and numbers[0] >= 1000:
            return numbers[0]
    return None


def guess_dims(graph: ir.Graph, metadata: Mapping[str, str] | None = None) -> list[DimGuess]:
    """A guess for every dynamic dim of every graph input (initializers excluded)."""
    metadata = metadata or {}
    guesses: list[DimGuess] = []
    image = _metadata_image_size(metadata)
    rate = _metadata_sample_rate(metadata)
    # An RNN's initial hidden and cell state is [layers * directions, batch, hidden] in ONNX's
    # layout: the inputs an RNN reads directly get their roles from it, and any input of that form
    # in a model with RNNs carries the batch at dim 1 (Silero VAD's `state` [2, ?, 128] reaches its
    # LSTM through If outputs, which no walk follows reliably).
    rnn = _has_rnn(graph)
    # roles the graph gives some inputs' dims, with why: what an RNN reads, a decoder's cache length
    read_by_rnn = _rnn_roles(graph) if rnn else {}
    given = {place: (role, "an RNN reads the input so") for place, role in read_by_rnn.items()}
    given.update({place: (role, "the KV cache's past length") for place, role in _cache_roles(graph).items()})
    head_sizes = _attention_head_sizes(graph)
    for value in graph.inputs:
        if value.name in graph.initializers:
            continue
        dims = dims_of(value)
        if not dims:
            continue
        layout = _roles_from_layout(value, dims)
        rnn_state = rnn and len(dims) == 3 and isinstance(dims[0], int) and not isinstance(dims[1], int) \
            and isinstance(dims[2], int)
        for axis, dim in enumerate(dims):
            if isinstance(dim, int):
                continue
            head = head_sizes.get((value.name or "", axis))
            if head is not None:  # no role's size: the one the attention reads
                guesses.append(DimGuess(value.name or "", axis, str(dim), OTHER, head, (),
                                        f"{OTHER} (GroupQueryAttention's head size): {head}"))
                continue
            guesses.append(_guess(value.name or "", axis, str(dim), dims, layout, rnn_state, image, rate,
                                  given.get((value.name or "", axis))))
    return guesses


def _guess(input_name: str, axis: int, name: str, dims: list[int | str], layout: dict[int, str],
           rnn_state: bool, image: tuple[int, int] | None, rate: int | None,
           given: tuple[str, str] | None) -> DimGuess:
    named = _role_from_name(name)
    if given is not None:
        role, why = given
    elif rnn_state and axis == 1:
        role, why = BATCH, "dim 1 of an RNN's initial state is its batch"
    elif named is not None:
        role, why = named, f"its name '{name}'"
    elif axis == 0:
        role, why = BATCH, "dim 0"
    elif axis in layout:
        role, why = layout[axis], "the input's layout"
    else:
        role, why = OTHER, "nothing in the model says"
    typical, fallbacks = ROLE_SIZES[role]
    source = f"{role} ({why}): default {typical}"
    if role in SPATIAL:
        sibling_axis = next((a for a, r in layout.items() if r in SPATIAL and a != axis), None)
        sibling = dims[sibling_axis] if sibling_axis is not None else None
        if image is not None:
            typical = image[0] if role == HEIGHT else image[1]
            source = f"{role} ({why}): {typical} from the model's metadata"
        elif isinstance(sibling, int) and sibling > 4:
            typical = sibling
            source = f"{role} ({why}): {typical}, as its static sibling dim"
    elif role == SAMPLES and rate is not None:
        typical = rate
        source = f"{role} ({why}): {typical}, one second at the metadata's sample rate"
    fallbacks = tuple(size for size in fallbacks if size != typical)
    return DimGuess(input_name, axis, name, role, typical, fallbacks, source)


def sample_shapes(graph: ir.Graph, guesses: list[DimGuess], attempt: int, *, batch: int
                  ) -> dict[str, list[int]]:
    """Concrete dims for every input of known rank at an attempt: static dims as declared, batch
    dims at `batch`, the others at their guess's size for that attempt. Dims that share a name
    share the first size given to it (ONNX gives one size to one name across a graph)."""
    by_place = {(g.input, g.axis): g for g in guesses}
    named: dict[str, int] = {}
    shapes: dict[str, list[int]] = {}
    sums = summed_dims(graph)
    for value in graph.inputs:
        if value.name in graph.initializers:
            continue
        dims = dims_of(value)
        if dims is None:
            continue
        concrete = []
        for axis, dim in enumerate(dims):
            if isinstance(dim, int):
                concrete.append(dim)
                continue
            guess = by_place.get((value.name or "", axis))
            size = batch if guess is None or guess.role == BATCH else guess.size(attempt)
            if dim != "?" and (value.name or "", axis) not in sums:
                size = named.setdefault(dim, size)
            concrete.append(size)
        shapes[value.name or ""] = concrete
    return with_sums(shapes, sums)


Place = tuple[str, int]  # (input name, axis)


def with_sums(shapes: dict[str, list[int]], sums: Mapping[Place, tuple[Place, ...]]) -> dict[str, list[int]]:
    """`shapes` with each summed dim set to the sum of its terms' sizes (in place, and returned)."""
    for (name, axis), terms in sums.items():
        sizes = [shapes[term][term_axis] for term, term_axis in terms
                 if term in shapes and term_axis < len(shapes[term])]
        if name in shapes and axis < len(shapes[name]) and len(sizes) == len(terms):
            shapes[name][axis] = sum(sizes)
    return shapes


_SUM = re.compile(r"^\s*[A-Za-z_][\w.]*(\s*\+\s*[A-Za-z_][\w.]*)+\s*$")


def summed_dims(graph: ir.Graph) -> dict[Place, tuple[Place, ...]]:
    """Input dims that are the sum of others, by place: a dim named as a sum of dim names
    ("past_sequence_length + sequence_length"), and a KV-cache decoder's attention mask, which
    spans the past and the new tokens however it is named. Drawn apart, the mask and the cache
    disagree and the model fails on the inputs."""
    from deploycc.graph.decoder import decoder_signature

    inputs = [v for v in graph.inputs if v.name not in graph.initializers]
    first_place: dict[str, Place] = {}
    for value in inputs:
        for axis, dim in enumerate(dims_of(value) or []):
            if isinstance(dim, str) and dim != "?":
                first_place.setdefault(dim.strip(), (value.name or "", axis))
    sums: dict[Place, tuple[Place, ...]] = {}
    for value in inputs:
        for axis, dim in enumerate(dims_of(value) or []):
            if isinstance(dim, str) and _SUM.fullmatch(dim):
                terms = tuple(first_place.get(term.strip()) for term in dim.split("+"))
                if all(term is not None for term in terms):
                    sums[(value.name or "", axis)] = tuple(t for t in terms if t is not None)
    signature = decoder_signature(graph)
    if signature is not None and signature.attention_mask is not None:
        mask = (signature.attention_mask, 1)
        entry = signature.cache[0]
        sums.setdefault(mask, ((entry.past, entry.axis), (signature.input_ids, 1)))
    return sums
