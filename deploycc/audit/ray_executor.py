"""Audit cells as Ray tasks, for corpora one machine cannot hold and for stages that must run on
the target hardware.

A cell whose stages need the hardware (a TensorRT engine, built, verified and timed) runs in two
tasks. The first, on any node, checks and legalizes the model and writes the device bundle (as
`deploycc build` does where there is no TensorRT). The second asks for a Ray custom resource named
after the target, so a board that joined with
`ray start --address=HEAD --resources='{"jetson-xavier": 1}'` receives it; it runs the bundle's
own run_on_device.py there, and the board's result.json is imported into the cell's build
directory on the head as `deploycc device import` would. The on-board task is shipped by value
and needs only the standard library, so the board needs Ray, numpy and TensorRT, not deploycc.

Each cell still runs in a child process with the timeout and memory limit, so a crash on a node
fails that cell only. A cell asking for a resource no node in the cluster has is reported as
"unschedulable" at once instead of waiting forever.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.audit.isolate import WORKER
from deploycc.device import ray_task
from deploycc.device.bundle import BUNDLE_DIR, RUNNER
from deploycc.errors import DeployccError, OptionError
from deploycc.io import StagedDirectory, tar_folder
from deploycc.records.audit import CellResult, CellSpec
from deploycc.results import from_dict
from deploycc.taxonomy import CellStatus, Failure, Stage

if TYPE_CHECKING:
    from deploycc.records.audit import AuditOptions


def _run_remote(spec_data: dict[str, Any], timeout: float, memory: int | None, worker: list[str]) -> dict:
    """A cell on any node; for a cell that wrote a device bundle, its build directory comes back
    as a tar (the node that ran it need not be the head)."""
    from deploycc.audit.isolate import run_isolated

    spec = from_dict(CellSpec, spec_data)
    cell = run_isolated(spec, timeout=timeout, memory_limit=memory, worker=worker)
    workdir = Path(spec.workdir)
    bundled = spec.device_engine is not None and cell.status == CellStatus.LEGALIZED and \
        (workdir / BUNDLE_DIR / RUNNER).is_file()
    return {"cell": asdict(cell), "outputs": tar_folder(workdir) if bundled else None}


def _connect(options: AuditOptions) -> Any:
    try:
        import ray
    except ImportError:
        raise OptionError("--executor ray needs Ray", hint="pip install 'deploycc[ray]'") from None
    if not ray.is_initialized():
        try:
            ray.init(address=options.ray_address, ignore_reinit_error=True, log_to_driver=False)
        except Exception as error:
            raise OptionError(f"cannot connect to Ray at {options.ray_address or 'a local instance'}: "
                              f"{str(error).splitlines()[0]}") from None
    # The on-board task travels by value: the board has Ray but not deploycc.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(ray_task)
    return ray


def _unschedulable(spec: CellSpec, resource: str) -> CellResult:
    hint = f"a device joins with ray start --resources='{{\"{resource}\": 1}}'"
    return CellResult(model=spec.model, target=spec.target, status=CellStatus.FAILED, stage=Stage.SCHEDULE,
                      category=Failure.UNSCHEDULABLE,
                      message=f"no node in the Ray cluster offers the resource '{resource}' ({hint})")


def _receive(outputs: bytes, workdir: Path) -> None:
    """The build directory a node wrote, in place on this machine (whole, or as it was)."""
    with StagedDirectory(workdir, force=True) as staged:
        ray_task.unpack(outputs, str(staged.staging), strip=workdir.name)


def on_device_cell(prepared: CellResult, workdir: Path, outcome: dict[str, Any],
                   stages: tuple[str, ...]) -> CellResult:
    """The cell after its bundle ran on the board: the board's result imported into the build
    directory, and the cell's status from it."""
    from deploycc.pipeline.device_import import import_result

    cell = dataclasses.replace(prepared, details=dict(prepared.details), stage=Stage.DEVICE)
    host = str(outcome.get("host", "the device"))
    cell.details["device_host"] = host
    if "error" in outcome:
        cell.status, cell.category = CellStatus.FAILED, Failure.BACKEND_CRASH
        cell.message = f"on {host}: {outcome['error']}"
        return cell
    with tempfile.TemporaryDirectory(prefix="deploycc-device-") as folder:
        result_file = Path(folder) / "result.json"
        result_file.write_text(outcome["result"])
        try:
            report = import_result(workdir, result_file)
        except DeployccError as error:
            cell.status, cell.category = CellStatus.FAILED, Failure.BACKEND_ERROR
            cell.message = f"the result from {host} was not imported: {error}"
            return cell
    device = report.device
    assert device is not None
    engine = " ".join(str(part) for part in (device.engine, device.engine_version) if part)
    cell.details.update(build_status=report.status, summary=report.summary, device_engine=engine)
    if device.verified:
        latency = device.latency or {}
        benched = "bench" in stages and bool(latency)
        cell.status = CellStatus.BENCHMARKED if benched else CellStatus.VERIFIED
        cell.stage, cell.category, cell.message = Stage.VERIFY, None, f"verified on {host} with {engine}"
        if latency.get("p50_ms") is not None:
            cell.details["p50_ms"] = latency["p50_ms"]
    else:
        cell.status, cell.stage = CellStatus.FAILED, device.stage
        cell.category = Failure.NUMERIC_MISMATCH if cell.stage == Stage.VERIFY else Failure.BACKEND_ERROR
        cell.message = f"on {host} with {engine}: {'failed' if device.reason is None else device.reason}"
    return cell


def run_ray(cells: list[tuple[str, CellSpec]], options: AuditOptions,
            done: Callable[[str, CellResult], None]) -> None:
    ray = _connect(options)
    available = ray.cluster_resources()
    prepare = ray.remote(_run_remote)
    on_board = ray.remote(ray_task.run_bundle)
    memory = options.memory_limit_mb << 20 if options.memory_limit_mb else None
    futures: dict[Any, str] = {}
    specs = dict(cells)
    prepared: dict[str, CellResult] = {}  # cells whose bundle is on a board now
    for key, spec in cells:
        if spec.device_engine and available.get(spec.target, 0) < 1:
            done(key, _unschedulable(spec, spec.target))
            continue
        task = prepare.options(num_cpus=1)
        futures[task.remote(asdict(spec), options.timeout, memory, list(options.worker or WORKER))] = key
    while futures:
        ready, _ = ray.wait(list(futures), num_returns=1, timeout=options.timeout + 60)
        if not ready:
            for future, key in futures.items():
                ray.cancel(future, force=True)
                done(key, CellResult(model=specs[key].model, target=specs[key].target,
                                     status=CellStatus.FAILED, stage=Stage.SCHEDULE, category=Failure.TIMEOUT,
                                     message=f"the Ray task did not finish in {options.timeout + 60:.0f} s"))
            return
        for future in ready:
            key = futures.pop(future)
            spec, data = specs[key], ray.get(future)
            workdir = Path(spec.workdir)
            if key in prepared:
                done(key, on_device_cell(prepared.pop(key), workdir, data, spec.stages))
                continue
            cell = from_dict(CellResult, data["cell"])
            if data["outputs"] is None:
                done(key, cell)
                continue
            _receive(data["outputs"], workdir)
            prepared[key] = cell
            task = on_board.options(num_cpus=1, resources={spec.target: 1})
            futures[task.remote(tar_folder(workdir / BUNDLE_DIR), engine=spec.device_engine,
                                iterations=options.device_iterations, timeout=options.timeout,
                                python=options.device_python)] = key

