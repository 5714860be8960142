"""`deploycc probe`: what a backend actually runs, measured on the ONNX backend conformance
cases shipped in the onnx wheel (about 1,880 single-op models with inputs and expected outputs),
as exported and after deploycc's legalization for the target.

Cases run in child processes, a chunk each (`jobs` chunks at once); a chunk whose process dies
is rerun one case per process, so a backend crash fails that case only. Feeding the cases and
judging their outputs, for every element type, is `conformance.py`. The result is a probed capability table
(op, opset version, dtype -> pass/fail) that `check --capabilities FILE` can lay over the
declared one, the pass rates, and the disagreements with the declared table.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploycc.audit.conformance import ATOL, RTOL, outcome
from deploycc.io.files import user_cache_dir
from deploycc.results import Result
from deploycc.taxonomy import CaseOutcome, Legality, LegalizeMode

CHUNK = 40


@dataclass
class CaseResult:
    case: str
    op: str
    domain: str
    version: int | None
    dtype: str | None
    raw: CaseOutcome | str  # as run back from the case's process, the enum's value
    legalized: CaseOutcome | str
    declared: Legality | str  # "?" where the case's process died before it was judged
    detail: str = ""
    legalized_detail: str = ""  # why the legalized model failed, when it did


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


@functools.cache
def all_cases() -> list[Any]:
    """The node cases of the installed onnx. Collecting them runs every case's exporter (15 s here,
    in each process that asks), so the first collection is kept in the user's cache, keyed by the
    onnx release that made it; a cache that does not load is made again."""
    import pickle

    import onnx
    from onnx.backend.test.case.node import collect_testcases

    cached = user_cache_dir("conformance") / f"onnx-{onnx.__version__}-node-cases.pickle"
    with contextlib.suppress(OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
        return list(pickle.loads(cached.read_bytes()))  # our own file, written below
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = list(collect_testcases())
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
        partial.write_bytes(pickle.dumps(cases, protocol=pickle.HIGHEST_PROTOCOL))
        partial.replace(cached)  # atomic: a concurrent reader sees the whole file or none
    return cases


def _legalized(case: Any, target_name: str) -> tuple[bytes | None, str]:
    """The case's model legalized for the target, or None with why it could not be."""
    import onnx

    from deploycc.errors import DeployccError
    from deploycc.options import LegalizeOptions
    from deploycc.pipeline.legalize import legalize
    from deploycc.targets.registry import resolve

    with tempfile.TemporaryDirectory(prefix="deploycc-probe-") as folder:
        source, out = Path(folder) / "case.onnx", Path(folder) / "legal.onnx"
        onnx.save(case.model, source)
        try:
            unchecked = LegalizeOptions(verify=False, prove=False, mode=LegalizeMode.PARTIAL)
            report = legalize(source, resolve(target_name), unchecked, output=out)
        except DeployccError as error:
            return None, str(error)[:160]
        except Exception as error:
            return None, f"{type(error).__name__}: {str(error)[:120]}"
        return (out.read_bytes() if out.exists() else None), report.summary[:160]


def _describe(case: Any) -> tuple[str, str, int | None, str | None]:
    from deploycc.legality import onnx_schemas as schemas

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
    from deploycc.graph.shapes import infer_shapes
    from deploycc.targets.registry import resolve

    target = resolve(target_name)
    kind = target.backend.kind
    wanted = set(names)
    out = []
    for case in all_cases():
        if case.name not in wanted:
            continue
        op, domain, version, dtype = _describe(case)
        raw, detail = outcome(kind, case.model.SerializeToString(), case)
        legal_bytes, why = _legalized(case, target_name)
        legalized, legalized_detail = outcome(kind, legal_bytes, case) if legal_bytes is not None \
            else (CaseOutcome.REFUSED, why)
        model = ir.serde.deserialize_model(case.model)
        infer_shapes(model)
        verdict = judge_model(model, target)
        declared = Legality.ILLEGAL if not verdict.legal else \
            Legality.CONDITIONAL if verdict.conditional else Legality.LEGAL
        out.append(asdict(CaseResult(case.name, op, domain, version, dtype, raw, legalized, declared,
                                     detail, legalized_detail)))
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


def _run_chunk(chunk: list[str], target: str) -> list[CaseResult]:
    rows = _child(chunk, target, timeout=60 + 10 * len(chunk))
    if rows is None:  # something in the chunk crashed or hung: one case per process
        rows = []
        for name in chunk:
            single = _child([name], target, timeout=60)
            rows.extend(single if single is not None else [asdict(CaseResult(
                name, "?", "", None, None, CaseOutcome.CRASH, CaseOutcome.CRASH, "?",
                "the backend process died or hung"))])
    return [CaseResult(**row) for row in rows]


def _op(case: Any) -> str:
    """The op a case tests: its graph's last node, as `_describe` names it."""
    nodes = case.model.graph.node
    return nodes[-1].op_type if nodes else "?"


def probe(target_name: str, *, limit: int | None = None, names: list[str] | None = None, jobs: int = 1,
          progress: Callable[[int, int], None] | None = None,
          finished: Callable[[str, list[CaseResult], int, int], None] | None = None) -> ProbeReport:
    """`progress(cases done, total)` as chunks finish; `finished(op, its results, cases done, total)`
    once every chosen case of an op has finished (an op, not a case: a full run has ~1,900 cases
    and ~200 ops; an expanded case counts under the op its graph ends with, so a few ops such as
    Reshape finish only near the end)."""
    from deploycc.targets.registry import resolve

    started = time.perf_counter()
    target = resolve(target_name)
    op_of = {c.name: _op(c) for c in all_cases()}
    chosen = list(op_of)
    if names:
        chosen = [n for n in chosen if n in set(names)]
    if limit is not None:
        chosen = chosen[:limit]
    chunks = [chosen[start:start + CHUNK] for start in range(0, len(chosen), CHUNK)]
    done: dict[int, list[CaseResult]] = {}
    waiting = Counter(op_of[name] for name in chosen)  # cases of each op not finished yet
    of_op: dict[str, list[CaseResult]] = defaultdict(list)
    # each chunk is its own process, so threads are enough to keep `jobs` of them busy
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_run_chunk, chunk, target.name): index for index, chunk in enumerate(chunks)}
        for future in as_completed(futures):
            rows = done[futures[future]] = future.result()
            count = sum(map(len, done.values()))
            for row in rows:
                op = op_of.get(row.case, row.op)
                of_op[op].append(row)
                waiting[op] -= 1
                if waiting[op] == 0 and finished is not None:
                    finished(op, of_op.pop(op), count, len(chosen))
            if progress is not None:
                progress(count, len(chosen))
    results = [row for index in sorted(done) for row in done[index]]
    disagreements = []
    for r in results:
        refused = r.raw in (CaseOutcome.REFUSED, CaseOutcome.CRASH)
        if r.declared in (Legality.LEGAL, Legality.CONDITIONAL) and refused:
            disagreements.append({"case": r.case, "op": r.op, "kind": "declared supported, backend refuses",
                                  "detail": r.detail})
        elif r.declared == Legality.ILLEGAL and r.raw == CaseOutcome.PASS:
            disagreements.append({"case": r.case, "op": r.op, "kind": "declared unsupported, backend runs it",
                                  "detail": ""})
    unreachable = Counter(r.op for r in results if r.legalized != CaseOutcome.PASS)
    return ProbeReport(target=target.name, backend=target.backend.kind, cases=len(results),
                       passed_raw=sum(r.raw == CaseOutcome.PASS for r in results),
                       passed_legalized=sum(r.legalized == CaseOutcome.PASS for r in results),
                       seconds=round(time.perf_counter() - started, 2), results=results,
                       disagreements=disagreements, unreachable=dict(unreachable.most_common()))


def capability_table(report: ProbeReport) -> dict[str, Any]:
    """(domain, op, version, dtype) -> pass | fail, as exported, for `check --capabilities`."""
    rows: dict[str, str] = {}
    for r in report.results:
        if r.version is None:
            continue
        key = f"{r.domain}|{r.op}|{r.version}|{r.dtype}"
        passed = r.raw == CaseOutcome.PASS
        rows[key] = "pass" if passed or rows.get(key) == "pass" else "fail"
    return {"target": report.target, "backend": report.backend, "rtol": RTOL, "atol": ATOL, "rows": rows}
