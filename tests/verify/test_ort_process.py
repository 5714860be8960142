"""ONNX Runtime's process is kept between runs (starting it cost more than a small model's run);
a process that ended while idle, or a run that hangs, never fails a healthy model's next run."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from deploycc.budget import TooLarge
from deploycc.verify import runner
from deploycc.verify.runner import run_ort, run_ort_isolated


def _matmuls(tmp_path: Path, size: int, count: int) -> Path:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [size, size],
                                np.eye(size, dtype=np.float32).ravel().tolist() if size <= 64 else
                                np.full(size * size, 1.0 / size, np.float32).tolist())
    names = ["x"] + [f"y{i}" for i in range(count)]
    nodes = [helper.make_node("MatMul", [names[i], "w"], [names[i + 1]]) for i in range(count)]
    square = [size, size]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, square)],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, square)], [weight])
    path = tmp_path / f"chain{size}x{count}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_process_is_kept_and_replaced_when_it_ended(tmp_path: Path) -> None:
    model = _matmuls(tmp_path, 8, 3)
    feeds = {"x": np.arange(64, dtype=np.float32).reshape(8, 8)}
    expected = run_ort(model, feeds)
    runner._close_idle()
    assert np.array_equal(run_ort_isolated(model, feeds)["y2"], expected["y2"])
    kept = list(runner._idle)
    assert len(kept) == 1
    run_ort_isolated(model, feeds)
    assert runner._idle == kept  # the same process ran again
    kept[0].process.kill()
    kept[0].process.wait()
    assert np.array_equal(run_ort_isolated(model, feeds)["y2"], expected["y2"])  # a new one
    assert runner._idle and runner._idle[0] is not kept[0]


def test_runs_from_two_threads_go_side_by_side(tmp_path: Path) -> None:
    model = _matmuls(tmp_path, 8, 2)
    feeds = {"x": np.ones((8, 8), np.float32)}
    runner._close_idle()
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(run_ort_isolated(model, feeds)["y1"]))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and all(np.array_equal(r, feeds["x"]) for r in results)
    assert 1 <= len(runner._idle) <= 2


def test_a_run_that_hangs_is_a_crash_and_the_next_run_works(tmp_path: Path) -> None:
    slow = _matmuls(tmp_path, 1024, 400)
    try:
        run_ort_isolated(slow, {"x": np.ones((1024, 1024), np.float32)}, timeout=0.2)
        raise AssertionError("a run of 400 1024x1024 MatMuls finished in 0.2 s")
    except TooLarge as error:  # past the run time budget: exit 2, stopped in the ORT process itself
        assert "did not finish in 0.2 s" in str(error)
    small = _matmuls(tmp_path, 8, 1)
    assert run_ort_isolated(small, {"x": np.ones((8, 8), np.float32)})["y0"].shape == (8, 8)


FORKED_CELL = """
import sys
import numpy as np
from pathlib import Path
from deploycc.verify import runner

runner.start_forked_ort_process()  # as an audit's cell does, before any thread
forked = runner._idle[0]
assert isinstance(forked.process, runner._Forked)
feeds = {"x": np.arange(64, dtype=np.float32).reshape(8, 8)}
first = runner.run_ort_isolated(Path(sys.argv[1]), feeds)["y2"]
assert runner._idle == [forked]  # it ran the model and is kept
forked.process.kill()
assert forked.process.wait() == -9
again = runner.run_ort_isolated(Path(sys.argv[1]), feeds)["y2"]  # a Python of its own now
assert not isinstance(runner._idle[0].process, runner._Forked)
np.save(sys.argv[2], np.stack([first, again]))
"""


def test_a_cell_s_forked_ort_process_runs_the_model_and_a_started_one_replaces_it(tmp_path: Path) -> None:
    """An audit's cell forks its ORT process while it has no thread (this test's own process has
    pytest's): the fork runs the model as a started process does, and once it is gone the next
    run starts a Python of its own."""
    import subprocess
    import sys

    model = _matmuls(tmp_path, 8, 3)
    expected = run_ort(model, {"x": np.arange(64, dtype=np.float32).reshape(8, 8)})["y2"]
    child = subprocess.run([sys.executable, "-c", FORKED_CELL, str(model), str(tmp_path / "out.npy")],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    first, again = np.load(tmp_path / "out.npy")
    assert np.array_equal(first, expected) and np.array_equal(again, expected)
