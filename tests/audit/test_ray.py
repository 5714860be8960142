"""The Ray executor against a local Ray instance with a custom resource named after a target:
hardware cells go where the resource is, a cell needing a resource no node has is reported, and a
TensorRT cell's bundle runs through the board's own runner on the node with the resource."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import onnx
import pytest

from deploycc import api
from deploycc.audit.run import AuditOptions
from examples.make_models import small_cnn

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'deploycc[ray]'")


# Ray gives its raylet 30 s to register with the GCS (hard-coded in ray._private.node, Ray 2.60;
# no setting changes it), and on a loaded 2-core machine (make test's xdist workers beside another
# CPU-heavy job) it took longer: "The current node timed out during startup", three errors. The
# start is tried again, its leftovers ended first, within a budget that fits such a machine; the
# node is made lighter to start: the loopback address (no interface lookup), a small object
# store, no usage report.
RAY_START_BUDGET_S = 300
STARTUP_TIMEOUT = "timed out during startup"


def _children() -> set[int]:
    """The pids of this process's children (the Ray processes a start spawned)."""
    me = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # the parent's pid, after the state
            found.add(int(stat.parent.name))
    return found


def start_local_ray(**settings: object) -> None:
    deadline = time.monotonic() + RAY_START_BUDGET_S
    while True:
        before = _children()
        try:
            ray.init(**settings)
            return
        except Exception as error:
            if STARTUP_TIMEOUT not in str(error) or time.monotonic() > deadline:
                raise
        ray.shutdown()
        for pid in _children() - before:  # the half-started node's GCS and raylet, ours alone
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def local_cluster():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        start_local_ray(num_cpus=2, resources={"jetson-xavier": 1, "ort-trt": 1}, include_dashboard=False,
                        log_to_driver=False, ignore_reinit_error=True, object_store_memory=128 << 20,
                        _node_ip_address="127.0.0.1")
        yield ray.cluster_resources()
        ray.shutdown()


def test_ray_executor_routes_hardware_cells_and_reports_unschedulable(local_cluster, tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    options = AuditOptions(executor="ray", batch=1, timeout=300, device_engine="onnxruntime",
                           device_iterations=20)
    report = api.audit([model], ["ort-cpu", "jetson-xavier", "jetson-orin"], tmp_path / "ray", options)
    cells = {c.target: c for c in report.cells}
    assert cells["ort-cpu"].status == "verified"
    # jetson-xavier has a node offering its resource: the bundle's runner ran there (ONNX Runtime
    # standing in for TensorRT), and its result was imported into the cell's build directory
    xavier = cells["jetson-xavier"]
    assert xavier.status == "verified", xavier.message
    assert xavier.details["device_engine"].startswith("onnxruntime")
    build = tmp_path / "ray" / "builds"
    reports = [json.loads(p.read_text()) for p in build.glob("*/report.json")]
    on_device = [r for r in reports if r.get("device")]
    assert len(on_device) == 1 and on_device[0]["status"] == "verified-on-device"
    assert on_device[0]["device"]["latency"]["iterations"] >= 1
    # no node offers jetson-orin: reported at once, not left waiting
    assert cells["jetson-orin"].category == "unschedulable" and "jetson-orin" in cells["jetson-orin"].message
    assert (tmp_path / "ray" / "audit.html").exists()
    local = api.audit([model], ["ort-cpu"], tmp_path / "ray", AuditOptions(batch=1, timeout=300))
    assert local.reused == 1  # both executors share the same store of finished cells


def test_ray_executor_reports_a_board_without_tensorrt(local_cluster, tmp_path: Path) -> None:
    """The node joined as a jetson-xavier but has no TensorRT: the cell fails there with the
    runner's reason, as a backend error, never as a pending bundle or a crash of the audit."""
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    report = api.audit([model], ["jetson-xavier"], tmp_path / "ray",
                       AuditOptions(executor="ray", batch=1, timeout=300))
    (cell,) = report.cells
    assert cell.status == "failed" and cell.category == "backend-error", cell.message
    assert "tensorrt" in cell.message.lower()


def test_an_onnxruntime_gpu_cell_runs_its_session_on_the_node_offering_the_target(local_cluster,
                                                                                  tmp_path: Path) -> None:
    """ort-trt's cell goes to the node with the ort-trt resource, and its runner takes the
    target's own engine (onnxruntime-gpu; this node's onnxruntime has only the CPU provider)."""
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    report = api.audit([model], ["ort-trt"], tmp_path / "ray",
                       AuditOptions(executor="ray", batch=1, timeout=300, device_iterations=5))
    (cell,) = report.cells
    assert cell.status == "verified", cell.message
    assert cell.details["device_engine"].startswith("onnxruntime-gpu")
