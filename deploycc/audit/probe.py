"""`deploycc probe`: what a backend actually runs, measured on the ONNX backend conformance
cases shipped in the onnx wheel (about 1,880 single-op models with inputs and expected outputs),
as exported and after deploycc's legalization for the target.

Cases run in child processes, a chunk at a time; a chunk whose process dies is rerun one case
per process, so a backend crash fails that case only. The result is a probed capability table
(op, opset version, dtype -> pass/fail) that `check --capabilities FILE` can lay over the
declared one, the pass rates, and the disagreements with the declared table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploycc.results import Result

RTOL, ATOL = 1e-3, 1e-4
REFUSAL_WORDS = ("NOT_IMPLEMENTED", "not supported", "Unsupported", "No conversion rule",
                 "Could not find an implementation")
CHUNK = 40


@dataclass
class CaseResult:
    case: str
    op: str
    domain: str
    version: int | None
    dtype: str | None
    raw: str  # pass | mismatch | refused | error | crash
    legalized: str
    declared: str  # legal | illegal | conditional
    detail: str = ""


@dataclass
class ProbeReport(Result):
    target: str
    backend: str
    cases: int
    passed_raw: int
    passed_legalized: int
    seconds: float
    results: list[CaseResult] = field(default_factory=list)
    disagreements: list[dict[str, str]] = field(default_factory=list)
    unreachable: dict[str, int] = field(default_factory=dict)


def all_cases() -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases()


def _run_backend(kind: str, model_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
    if kind == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    import openvino as ov

    core = ov.Core()
    model = core.read_model(model=model_bytes)
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    # OpenVINO drops graph inputs nothing reads (a Shape folded to a constant): feed what it kept
    kept = {name for port in compiled.inputs for name in port.get_names()}
    results = compiled({k: v for k, v in feeds.items() if k in kept})
    return [results[port] for port in compiled.outputs]


def _outcome(kind: str, model_bytes: bytes, case: Any) -> tuple[str, str]:
    import numpy as np

    try:
        for inputs, expected in case.data_sets:
            import onnx

            proto = onnx.load_from_string(model_bytes)
            constants = {t.name for t in proto.graph.initializer}
            names = [i.name for i in proto.graph.input if i.name not in constants]
            feeds = dict(zip(names, inputs, strict=False))
            try:
                actual = _run_backend(kind, model_bytes, feeds)
            except Exception as error:
                lines = str(error).strip().splitlines()
                text = lines[0][:160] if lines else type(error).__name__
                refused = any(word in text for word in REFUSAL_WORDS)
                return ("refused" if refused else "error"), text
            for got, want in zip(actual, expected, strict=False):
                got, want = np.asarray(got), np.asarray(want)
                if want.dtype.kind in "fc":
                    close = got.shape == want.shape and np.allclose(got, want, rtol=RTOL, atol=ATOL,
                                                                    equal_nan=True)
                    if not close:
                        return "mismatch", "outputs differ beyond rtol 1e-3 / atol 1e-4"
                elif got.shape != want.shape or not np.array_equal(got, want):
                    return "mismatch", "outputs differ"
    except Exception as error:  # inputs the harness cannot feed (sequences, optionals)
        return "error", f"harness: {type(error).__name__}"
    return "pass", ""


def _legalized(case: Any, target_name: str) -> tuple[bytes | None, str]:
    """The case's model legalized for the target, or None with why it could not be."""
    import onnx

    from deploycc.errors import DeployccError
    from deploycc.pipeline.context import LegalizeOptions
    from deploycc.pipeline.legalize import legalize
    from deploycc.targets.registry import resolve

    with tempfile.TemporaryDirectory(prefix="deploycc-probe-") as folder:
        source, out = Path(folder) / "case.onnx", Path(folder) / "legal.onnx"
        onnx.save(case.model, source)
        try:
            report = legalize(source, resolve(target_name), LegalizeOptions(verify=False, prove=False,
                                                                            mode="partial"), output=out)
        except DeployccError as error:
            return None, str(error)[:160]
        except Exception as error:
            return None, f"{type(error).__name__}: {str(error)[:120]}"
        return (out.read_bytes() if out.exists() else None), report.summary[:160]


def _describe(case: Any) -> tuple[str, str, int | None, str | None]:
    from deploycc.legality import schemas

    graph = case.model.graph
    node = graph.node[-1] if graph.node else None
    if node is None:
        return "?", "", None, None
    domain = node.domain if node.domain not in ("ai.onnx",) else ""
    opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), 1)
    version = schemas.op_version(node.op_type, domain, opset) if domain in ("", "ai.onnx.ml") else None
    dtype = None
    if graph.input:
        import onnx_ir as ir

        from deploycc.dtypes import dtype_name

        elem = graph.input[0].type.tensor_type.elem_type
        dtype = dtype_name(ir.DataType(elem)) if elem else None
    return node.op_type, domain, version, dtype


def probe_cases(names: list[str], target_name: str) -> list[dict[str, Any]]:
    """Run the named cases here (called inside a child process)."""
    import onnx_ir as ir

    from deploycc.analysis.check import judge_model
    from deploycc.analysis.shapes import infer_shapes
    from deploycc.targets.registry import resolve

    target = resolve(target_name)
    kind = target.backend.kind
    wanted = set(names)
    out = []
    for case in all_cases():
        if case.name not in wanted:
            continue
        op, domain, version, dtype = _describe(case)
        raw, detail = _outcome(kind, case.model.SerializeToString(), case)
        legal_bytes, why = _legalized(case, target_name)
        legalized = _outcome(kind, legal_bytes, case)[0] if legal_bytes is not None else "refused"
        model = ir.serde.deserialize_model(case.model)
        infer_shapes(model)
        verdict = judge_model(model, target)
        declared = "illegal" if not verdict.legal else ("conditional" if verdict.conditional else "legal")
        out.append(asdict(CaseResult(case.name, op, domain, version, dtype, raw, legalized, declared,
                                     detail or (why if legal_bytes is None else ""))))
    return out


def _child(names: list[str], target: str, timeout: float) -> list[dict[str, Any]] | None:
    code = ("import json, sys; from deploycc.audit.probe import probe_cases; "
            "names, target = json.loads(sys.stdin.read()); print(json.dumps(probe_cases(names, target)))")
    try:
        child = subprocess.run([sys.executable, "-c", code], input=json.dumps([names, target]),
                               capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    lines = [line for line in child.stdout.splitlines() if line.startswith("[")]
    return json.loads(lines[-1]) if child.returncode == 0 and lines else None


def probe(target_name: str, *, limit: int | None = None, names: list[str] | None = None,
          progress: Callable[[int, int], None] | None = None) -> ProbeReport:
    from deploycc.targets.registry import resolve

    started = time.perf_counter()
    target = resolve(target_name)
    chosen = [c.name for c in all_cases()]
    if names:
        chosen = [n for n in chosen if n in set(names)]
    if limit is not None:
        chosen = chosen[:limit]
    results: list[CaseResult] = []
    for start in range(0, len(chosen), CHUNK):
        chunk = chosen[start:start + CHUNK]
        rows = _child(chunk, target.name, timeout=60 + 10 * len(chunk))
        if rows is None:  # something in the chunk crashed or hung: one case per process
            rows = []
            for name in chunk:
                single = _child([name], target.name, timeout=60)
                rows.extend(single if single is not None else [asdict(CaseResult(
                    name, "?", "", None, None, "crash", "crash", "?", "the backend process died or hung"))])
        results.extend(CaseResult(**row) for row in rows)
        if progress is not None:
            progress(len(results), len(chosen))
    disagreements = []
    for r in results:
        if r.declared in ("legal", "conditional") and r.raw in ("refused", "crash"):
            disagreements.append({"case": r.case, "op": r.op, "kind": "declared supported, backend refuses",
                                  "detail": r.detail})
        elif r.declared == "illegal" and r.raw == "pass":
            disagreements.append({"case": r.case, "op": r.op, "kind": "declared unsupported, backend runs it",
                                  "detail": ""})
    unreachable = Counter(r.op for r in results if r.legalized != "pass")
    return ProbeReport(target=target.name, backend=target.backend.kind, cases=len(results),
                       passed_raw=sum(r.raw == "pass" for r in results),
                       passed_legalized=sum(r.legalized == "pass" for r in results),
                       seconds=round(time.perf_counter() - started, 2), results=results,
                       disagreements=disagreements, unreachable=dict(unreachable.most_common()))


def capability_table(report: ProbeReport) -> dict[str, Any]:
    """(domain, op, version, dtype) -> pass | fail, as exported, for `check --capabilities`."""
    rows: dict[str, str] = {}
    for r in report.results:
        if r.version is None:
            continue
        key = f"{r.domain}|{r.op}|{r.version}|{r.dtype}"
        passed = r.raw == "pass"
        rows[key] = "pass" if passed or rows.get(key) == "pass" else "fail"
    return {"target": report.target, "backend": report.backend, "rtol": RTOL, "atol": ATOL, "rows": rows}
