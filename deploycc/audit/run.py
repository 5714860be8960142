"""`deploycc audit`: the conversion-success matrix of a corpus of models across targets.

Every (model, target) cell runs in its own process (timeout, memory limit), in parallel
(`--jobs`) or as Ray tasks (`--executor ray`); finished cells are stored by key and skipped on a
rerun; reports are written to OUTDIR as they would be by any executor.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.audit.cells import DEFAULT_STAGES, STAGES, CellResult, CellSpec
from deploycc.audit.isolate import WORKER, run_isolated
from deploycc.audit.records import AuditReport
from deploycc.audit.report import summarize, write_reports
from deploycc.audit.store import CellStore
from deploycc.errors import OptionError

if TYPE_CHECKING:
    from deploycc.targets.schema import Target


@dataclass
class AuditOptions:
    stages: tuple[str, ...] = DEFAULT_STAGES
    jobs: int = 1
    timeout: float = 600.0
    memory_limit_mb: int | None = None
    fresh: bool = False
    batch: int | None = None
    executor: str = "local"
    ray_address: str | None = None
    partition: bool = False  # refused models tried again with host segments (build stage)
    precision: str | None = None  # None: each target's default; int8 calibrates on the hints' samples
    max_drop: float = 0.01
    metric: str = "auto"
    # Ray executor, TensorRT cells: the runner on the board. "onnxruntime" stands ONNX Runtime in
    # for TensorRT (a node without TensorRT checks the loop); python: the board's interpreter for
    # the runner when not the Ray worker's own (the system Python that has JetPack's bindings).
    device_engine: str = "tensorrt"
    device_python: str | None = None
    device_iterations: int = 200
    worker: Sequence[str] = WORKER  # the cell process; tests substitute one that really crashes


def discover(paths: Sequence[str | Path]) -> list[Path]:
    """Model files, folders searched recursively for *.onnx, or list files (one path per line)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.onnx") if p.is_file()))
        elif path.suffix == ".onnx":
            if not path.exists():
                raise OptionError(f"{path}: no such model")
            found.append(path)
        elif path.is_file():
            for line in path.read_text().splitlines():
                entry = line.strip()
                if entry and not entry.startswith("#"):
                    listed = (path.parent / entry) if not Path(entry).is_absolute() else Path(entry)
                    if not listed.exists():
                        raise OptionError(f"{path}: lists {entry}, which does not exist")
                    found.append(listed)
        else:
            raise OptionError(f"{path}: not a model, a folder or a list file")
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise OptionError("no models found", hint="give .onnx files, folders that hold them, or a list file")
    return unique


def hints_path(model: Path) -> Path:
    return model.with_name(model.name.removesuffix(".onnx") + ".hints.json")


def read_hints(model: Path) -> dict[str, Any]:
    """MODEL.hints.json beside a model, when there is one: {"shapes": {input: [dims]}, "inputs":
    "file.npz", "calibration": "folder"} (paths relative to the hints file). What a corpus knows of
    each model that its signature does not say: a static size for every dynamic dim, values the
    model takes, and samples to calibrate int8 on (`--precision int8`)."""
    import hashlib
    import json

    path = hints_path(model)
    if not path.is_file():
        return {}
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
        shapes = {str(name): [d if isinstance(d, int) else str(d) for d in dims]
                  for name, dims in (data.get("shapes") or {}).items()}
    except (ValueError, AttributeError, TypeError) as error:
        raise OptionError(f"{path}: not a hints file ({error})",
                          hint='expected {"shapes": {"x": [1, 3, 224, 224]}, "inputs": "x.npz"}') from None
    inputs = data.get("inputs")
    digest = hashlib.sha256(raw)
    if inputs:
        npz = path.parent / str(inputs)
        if not npz.is_file():
            raise OptionError(f"{path}: names inputs {inputs!r}, which does not exist")
        digest.update(npz.read_bytes())
    calibration = data.get("calibration")
    if calibration:
        folder = path.parent / str(calibration)
        if not folder.is_dir():
            raise OptionError(f"{path}: names calibration data {calibration!r}, which is not a folder")
        for sample in sorted(folder.glob("*.npz")):
            digest.update(sample.read_bytes())
    return {"shapes": shapes, "inputs": str(path.parent / inputs) if inputs else None,
            "calibration": str(path.parent / calibration) if calibration else None,
            "hints_sha256": digest.hexdigest()[:16]}


def resolve_targets(names: Sequence[str], jetpack: str | None) -> list[Target]:
    from deploycc.targets import registry

    if not names:
        raise OptionError("no target given", hint="pass --target NAME (repeatable) or --target all")
    if "all" in names:
        return registry.list_targets()
    return [registry.resolve(name, jetpack) for name in names]


def plan(models: list[Path], targets: list[Target], options: AuditOptions, outdir: Path,
         jetpack: str | None) -> list[tuple[str, CellSpec]]:
    from deploycc.io import sha256_file

    unknown = [s for s in options.stages if s not in STAGES]
    if unknown:
        raise OptionError(f"unknown stage {unknown[0]!r}", hint=f"stages: {', '.join(STAGES)}")
    version = _version()
    cells = []
    for model in models:
        digest = sha256_file(model)
        hints = read_hints(model)
        for target in targets:
            spec = CellSpec(model=str(model), model_sha256=digest, target=target.name,
                            target_hash=target.spec_hash, stages=tuple(options.stages), jetpack=jetpack,
                            batch=options.batch, partition=options.partition, precision=options.precision,
                            max_drop=options.max_drop, metric=options.metric, **hints)
            # On Ray, a TensorRT cell's engine is built, verified and timed by the runner on a board.
            if options.executor == "ray" and spec.needs_hardware(target.backend.kind):
                spec.device_engine = options.device_engine
            key = spec.key(version)
            spec.workdir = str(outdir / "builds" / key)
            cells.append((key, spec))
    return cells


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("deploycc")
    except metadata.PackageNotFoundError:
        return "unknown"


def run_local(cells: list[tuple[str, CellSpec]], options: AuditOptions,
              done: Callable[[str, CellResult], None]) -> None:
    memory = options.memory_limit_mb << 20 if options.memory_limit_mb else None
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = {pool.submit(run_isolated, spec, timeout=options.timeout, memory_limit=memory,
                               worker=options.worker): key for key, spec in cells}
        for future in as_completed(futures):
            done(futures[future], future.result())


def audit(paths: Sequence[str | Path], target_names: Sequence[str], outdir: str | Path,
          options: AuditOptions | None = None, *, jetpack: str | None = None,
          progress: Callable[[Counter[str], int], None] | None = None) -> AuditReport:

    options = options or AuditOptions()
    started = time.perf_counter()
    out = Path(outdir)
    models = discover(paths)
    targets = resolve_targets(target_names, jetpack)
    store = CellStore(out / "cells")
    cells = plan(models, targets, options, out, jetpack)
    results: dict[str, CellResult] = {}
    pending = []
    for key, spec in cells:
        cached = None if options.fresh else store.get(key)
        if cached is not None:
            results[key] = cached
        else:
            pending.append((key, spec))
    counts: Counter[str] = Counter(r.status for r in results.values())

    def done(key: str, result: CellResult) -> None:
        store.put(key, result)
        results[key] = result
        counts[result.status] += 1
        if progress is not None:
            progress(counts, len(cells))

    if progress is not None:
        progress(counts, len(cells))
    if options.executor == "ray":
        from deploycc.audit.ray_executor import run_ray

        run_ray(pending, options, done)
    elif options.executor == "local":
        run_local(pending, options, done)
    else:
        raise OptionError(f"unknown executor {options.executor!r}", hint="local or ray")
    ordered = [results[key] for key, _ in cells]
    names = [t.name for t in targets]
    summary, top_failures = summarize(ordered, names)
    report = AuditReport(outdir=str(out), models=[str(m) for m in models], targets=names,
                         stages=list(options.stages), cells=ordered, summary=summary,
                         top_failures=top_failures,
                         counts=dict(Counter(r.status for r in ordered)),
                         seconds=round(time.perf_counter() - started, 3),
                         reused=sum(1 for r in ordered if r.cached))
    write_reports(report, out)
    return report


def iter_statuses(report: AuditReport) -> Iterator[tuple[str, str, str]]:
    for cell in report.cells:
        yield cell.model, cell.target, cell.status
