"""The static tables held against the installed backends' own answers.

ONNX Runtime: its CPU kernel registry (the source of our table) must match the table exactly,
and on the conformance cases our verdict must agree with whether ORT can create a session.
OpenVINO: our verdict must agree with whether the ONNX frontend converts the model and the CPU
plugin compiles it.
Every disagreement is printed (pytest -s, or in the failure message) so the data can be fixed.
"""

from __future__ import annotations

import os

from deploycc.targets import registry
from tests.test_conformance import cases, judged

OPEN_END = 2147483647
# Every STRIDE-th case in `make test` (a session each: the whole sweep is two minutes of the suite
# on two cores); `make conformance` runs every case, as the README's figures were measured.
STRIDE = int(os.environ.get("DEPLOYCC_CONFORMANCE_STRIDE", "4"))


def test_ort_table_is_the_installed_kernel_registry():
    import onnxruntime as ort
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    target = registry.resolve("ort-cpu")
    # The dev extra pins this release; a newer one needs its table (tools/import_capabilities.py).
    assert ort.__version__ == target.backend.version, \
        f"installed onnxruntime {ort.__version__}, table is for {target.backend.version}: regenerate or pin"
    live = set()
    for kernel in C.get_all_opkernel_def():
        if kernel.provider != "CPUExecutionProvider":
            continue
        domain = "" if kernel.domain in ("", "ai.onnx") else kernel.domain
        start, end = kernel.version_range
        live.add((domain, kernel.op_name, start, None if end == OPEN_END else end))
    table = {(e.domain, e.op, e.since, e.until) for e in target.ops.entries if e.since is not None}
    assert table - live == set(), "in the table but not registered"
    assert live - table == set(), "registered but not in the table"


def assert_agreement(target_name: str, backend_accepts, min_ratio: float, max_false_refusals: int) -> None:
    """Compare verdicts with the backend on every case; print and bound the disagreements."""
    agree, disagreements = 0, []
    sample = cases()[::STRIDE]
    for case in sample:
        verdict = judged()[case.name][target_name]
        # a node that converts but computes a wrong result (probed) is a conversion the backend accepts
        ours = verdict.legal or all(group.category == "wrong-result" for group in verdict.illegal)
        theirs, message = backend_accepts(case.model)
        if ours == theirs:
            agree += 1
        else:
            side = "we refuse, backend runs" if theirs else "we accept, backend refuses"
            disagreements.append(f"{case.name}: {side}: {message}")
    total = len(sample)
    print(f"\n{target_name}: {agree}/{total} agree; disagreements:\n" + "\n".join(disagreements))
    assert agree / total >= min_ratio, "\n".join(disagreements)
    refused_but_runs = [d for d in disagreements if "we refuse" in d]
    assert len(refused_but_runs) <= max_false_refusals, "\n".join(refused_but_runs)


def test_ort_agrees_with_the_table_on_conformance_cases():
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4

    def accepts(model):
        try:
            ort.InferenceSession(model.SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
            return True, ""
        except Exception as error:
            return False, str(error).splitlines()[0][:160]

    # Measured 1,847 of 1,884: the rest are dtypes inside function bodies and attribute limits.
    assert_agreement("ort-cpu", accepts, min_ratio=0.97, max_false_refusals=10)


def test_openvino_agrees_with_the_table_on_conformance_cases():
    import openvino as ov

    core = ov.Core()

    def accepts(model):
        try:  # compiled for the CPU plugin too: it refuses some models the frontend converts
            core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU")
            return True, ""
        except Exception as error:
            lines = str(error).strip().splitlines()
            return False, (lines[-1] if lines else type(error).__name__)[:160]

    # Measured 1,809 of 1,884 (96.0%), with no model refused that OpenVINO converts; every
    # fourth case: 446 of 471 (94.7%), the disagreements falling unevenly.
    assert_agreement("openvino-cpu", accepts, min_ratio=0.94, max_false_refusals=5)
