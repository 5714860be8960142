"""The schema result.json is read against: the board's runner (device/run_on_device.py) writes it,
DeviceResult reads it back. The specs are data (Obj, Seq, Names, Scalar) read by one checker,
`problem`, which names the first field that breaks one; device/board_files.py checks the
board's other files (the reference index, trtexec's outputs) with the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

NON_FINITE = ("inf", "-inf", "nan")  # how deploycc's own JSON writes such floats (results.strict)


@dataclass(frozen=True)
class Scalar:
    what: str  # "a number", said in the refusal
    accepts: Callable[[Any], bool]


@dataclass(frozen=True)
class Maybe:
    spec: Spec  # or null


@dataclass(frozen=True)
class Obj:
    required: Mapping[str, Spec] = field(default_factory=dict)
    optional: Mapping[str, Spec] = field(default_factory=dict)


@dataclass(frozen=True)
class Seq:
    item: Spec


@dataclass(frozen=True)
class Names:
    """{name: value}, the names the board's (nodes, providers, rails)."""

    value: Spec


Spec: TypeAlias = Scalar | Maybe | Obj | Seq | Names


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# JSON's, as json.loads makes them (NaN and Infinity included: Python's json writes them)
MEASURE = Scalar("a number", lambda v: _is_number(v) or v in NON_FINITE)  # as deploycc wrote it back too
INT = Scalar("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
STR = Scalar("a string", lambda v: isinstance(v, str))
BOOL = Scalar("true or false", lambda v: isinstance(v, bool))
TEXTS = Seq(STR)


def _maybe(**specs: Spec) -> dict[str, Spec]:
    return {key: Maybe(spec) for key, spec in specs.items()}


# result.json as run_on_device.py writes it (RESULT_SCHEMA 1) and deploycc writes it back into
# report.json: the keys report/markdown.py reads unguarded are required where their object is there.
_SAMPLE = Obj({"gpu_memory_used_kb": MEASURE}, _maybe(power_mw=MEASURE))
RESULT_SPEC = Obj(
    {"schema": INT, "status": STR, "stage": STR, "model_sha256": STR, "engine": STR},
    _maybe(engine_version=STR, reason=STR, host=STR, machine=STR, python=STR, power_mode=STR,
           build_seconds=MEASURE, tegrastats=TEXTS,
           outputs=Seq(Obj({"name": STR, "passed": BOOL},
                           _maybe(max_abs_error=MEASURE, cosine=MEASURE, problem=STR, shape=Seq(INT),
                                  dtype=STR, mismatched=INT))),
           tolerances=Obj({}, _maybe(atol=MEASURE, rtol=MEASURE, min_cosine=MEASURE, mismatch_share=MEASURE)),
           latency=Obj(_maybe(p50_ms=MEASURE, p90_ms=MEASURE, p99_ms=MEASURE, throughput_per_s=MEASURE),
                       _maybe(iterations=INT, warmup_runs=INT, mean_ms=MEASURE, min_ms=MEASURE,
                              trtexec=Obj())),
           memory=Obj({}, _maybe(peak_rss_kb=MEASURE, nvmap_delta_kb=MEASURE)),
           tegrastats_summary=Obj({}, _maybe(samples=INT, ram_peak_mb=MEASURE, gr3d_mean_percent=MEASURE,
                                             power_mean_mw=Names(MEASURE))),
           nvml=Obj({}, _maybe(before=_SAMPLE, after=_SAMPLE)),
           clocks=Obj({}, _maybe(cpu_locked=BOOL, gpu_locked=BOOL, gpu_mhz=MEASURE, jetson_clocks=BOOL)),
           int8_forms=Obj({}, _maybe(explicit_p50_ms=MEASURE, implicit_p50_ms=MEASURE, chosen=STR,
                                     implicit_error=STR)),
           fp32_layers=Obj({}, _maybe(asked=TEXTS, note=STR, pinned=Names(TEXTS), unmatched=TEXTS,
                                      obeyed=BOOL, inspector=Obj({}, _maybe(engine=Names(STR),
                                                                            not_found=TEXTS)))),
           placement=Obj({}, _maybe(counts=Names(MEASURE), nodes=Names(STR), missing_providers=TEXTS,
                                    differs=Names(STR))),
           # a decoder's generation timed on the board (run_on_device.time_generation)
           generation=Obj({"prompts": Seq(Obj({"prompt_tokens": INT}, _maybe(
               decode_steps=INT, time_to_first_token_ms=MEASURE, decode_tokens_per_s=MEASURE,
               kv_cache_bytes=INT, context_tokens=INT, memory_total_kb=MEASURE,
               kv_cache_share_of_memory=MEASURE, power_mean_mw=MEASURE, tokens_per_s_per_watt=MEASURE,
               tegrastats=TEXTS, error=STR)))})))

# A result that says verified says against what: every output passed within the tolerances, as
# run_on_device.py's check_result holds it (verified only at stage done).
VERIFIED_SPEC = Obj({"stage": Scalar("done (the result says verified)", lambda v: v == "done"),
                     "outputs": Seq(Obj({"passed": Scalar("true (the result says verified)",
                                                          lambda v: v is True)})),
                     "tolerances": Obj({"atol": MEASURE, "rtol": MEASURE, "min_cosine": MEASURE})})


def _within(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict | list) else f"a JSON {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def problem(value: Any, spec: Spec, where: str = "") -> str | None:
    """The first place `value` breaks `spec`, as 'field: what is wrong'; None where it keeps it.
    Recurses only as deep as the spec: data nested deeper is kept unread."""
    if isinstance(spec, Maybe):
        return None if value is None else problem(value, spec.spec, where)
    if isinstance(spec, Scalar):
        return None if spec.accepts(value) else f"{where or 'the value'}: {spec.what} was expected, " \
                                                 f"not {shown(value)}"
    if isinstance(spec, Seq):
        if not isinstance(value, list):
            return f"{where or 'the value'}: a JSON list was expected, not {shown(value)}"
        if isinstance(spec.item, Scalar):  # millions of trtexec values: no field name made per item
            bad = next((i for i, item in enumerate(value) if not spec.item.accepts(item)), None)
            return None if bad is None else problem(value[bad], spec.item, f"{where}[{bad}]")
        found = (problem(item, spec.item, f"{where}[{i}]") for i, item in enumerate(value))
        return next((text for text in found if text), None)
    if not isinstance(value, dict):
        return f"{where or 'the value'}: a JSON object was expected, not {shown(value)}"
    if isinstance(spec, Names):
        found = (problem(item, spec.value, f"{where}[{key!r}]") for key, item in value.items())
        return next((text for text in found if text), None)
    missing = [key for key in spec.required if key not in value]
    if missing:
        return f"{_within(where, missing[0])}: missing"
    known = {**spec.required, **spec.optional}
    found = (problem(value[key], known[key], _within(where, key)) for key in known if key in value)
    return next((text for text in found if text), None)
