"""Audit cells as Ray tasks, for corpora one machine cannot hold and for stages that must run on
the target hardware.

Cells whose stages need the hardware (building and benchmarking TensorRT engines) ask for a Ray
custom resource named after the target, so a Jetson that joined with
`ray start --address=HEAD --resources='{"jetson-xavier": 1}'` receives exactly those cells;
the rest run on any node. Each task still runs its cell in a child process with the timeout and
memory limit, so a crash on a node fails that cell only. A cell asking for a resource no node in
the cluster has is reported as "unschedulable" at once instead of waiting forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from deploycc.audit.cells import CellResult, CellSpec
from deploycc.errors import OptionError
from deploycc.taxonomy import CellStatus, Failure

if TYPE_CHECKING:
    from deploycc.audit.run import AuditOptions


def _run_remote(spec_data: dict[str, Any], timeout: float, memory: int | None, worker: list[str]) -> dict:
    from deploycc.audit.isolate import run_isolated

    spec_data["stages"] = tuple(spec_data["stages"])
    return asdict(run_isolated(CellSpec(**spec_data), timeout=timeout, memory_limit=memory, worker=worker))


def run_ray(cells: list[tuple[str, CellSpec]], options: AuditOptions, backends: dict[str, str],
            done: Callable[[str, CellResult], None]) -> None:
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
    available = ray.cluster_resources()
    remote = ray.remote(_run_remote)
    memory = options.memory_limit_mb << 20 if options.memory_limit_mb else None
    futures: dict[Any, str] = {}
    specs = dict(cells)
    for key, spec in cells:
        resources = {spec.target: 1} if spec.needs_hardware(backends.get(spec.target, "")) else {}
        missing = [name for name in resources if available.get(name, 0) < 1]
        if missing:
            hint = f"a device joins with ray start --resources='{{\"{missing[0]}\": 1}}'"
            message = f"no node in the Ray cluster offers the resource '{missing[0]}' ({hint})"
            done(key, CellResult(model=spec.model, target=spec.target, status=CellStatus.FAILED,
                                 stage="schedule", category=Failure.UNSCHEDULABLE, message=message))
            continue
        task = remote.options(num_cpus=1, resources=resources)
        futures[task.remote(asdict(spec), options.timeout, memory, list(options.worker))] = key
    while futures:
        ready, _ = ray.wait(list(futures), num_returns=1, timeout=options.timeout + 60)
        if not ready:
            for future, key in futures.items():
                ray.cancel(future, force=True)
                done(key, CellResult(model=specs[key].model, target=specs[key].target,
                                     status=CellStatus.FAILED, stage="schedule", category=Failure.TIMEOUT,
                                     message=f"the Ray task did not finish in {options.timeout + 60:.0f} s"))
            return
        for future in ready:
            key = futures.pop(future)
            data = ray.get(future)
            done(key, CellResult(**data))
