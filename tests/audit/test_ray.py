"""The Ray executor against a local Ray instance with a custom resource named after a target:
hardware cells go where the resource is, a cell needing a resource no node has is reported."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from deploycc import api
from deploycc.audit.run import AuditOptions
from examples.make_models import small_cnn

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'deploycc[ray]'")


@pytest.fixture(scope="module")
def local_cluster():
    ray.init(num_cpus=2, resources={"jetson-xavier": 1}, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    yield ray.cluster_resources()
    ray.shutdown()


def test_ray_executor_routes_hardware_cells_and_reports_unschedulable(local_cluster, tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    options = AuditOptions(executor="ray", batch=1, timeout=300)
    report = api.audit([model], ["ort-cpu", "jetson-xavier", "jetson-orin"], tmp_path / "ray", options)
    cells = {c.target: c for c in report.cells}
    assert cells["ort-cpu"].status == "verified"
    # jetson-xavier has a node offering its resource: the cell ran (bundled: no TensorRT here)
    xavier = cells["jetson-xavier"]
    assert xavier.status == "legalized" and "pending on the device" in xavier.message
    # no node offers jetson-orin: reported at once, not left waiting
    assert cells["jetson-orin"].category == "unschedulable" and "jetson-orin" in cells["jetson-orin"].message
    assert (tmp_path / "ray" / "audit.html").exists()
    local = api.audit([model], ["ort-cpu"], tmp_path / "ray", AuditOptions(batch=1, timeout=300))
    assert local.reused == 1  # both executors share the same store of finished cells
