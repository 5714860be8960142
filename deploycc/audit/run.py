"""`deploycc audit`: the conversion-success matrix of a corpus of models across targets.

Every (model, target) cell runs in its own process (timeout, memory limit), in parallel
(`--jobs`) or as Ray tasks (`--executor ray`); finished cells are stored by key and skipped on a
rerun; a cell builds into OUTDIR/builds/<model stem>.<target>/, which audit.html links to; reports
are written to OUTDIR as they would be by any executor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc import io
from deploycc.audit.isolate import WORKER, run_isolated
from deploycc.audit.report import summarize, write_reports
from deploycc.audit.store import CellStore
from deploycc.device import BOARD_ENGINE
from deploycc.errors import OptionError
from deploycc.records.audit import HOST_SEGMENTS, STAGES, AuditOptions, AuditReport, CellResult, CellSpec

if TYPE_CHECKING:
    from deploycc.targets.schema import Target


def discover(paths: Sequence[str | Path]) -> list[Path]:
    """Model files, folders searched recursively for *.onnx and *.pt2, or list files (one entry
    per line). An entry is an ONNX model or a PyTorch model as `build` takes one: a .pt2 or
    TorchScript archive, or `package.module:factory` / `file.py:factory` (kept as written: the
    worker imports it)."""
    from deploycc.frontend import source_kind

    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".onnx", ".pt2")))
        elif source_kind(raw) == "factory":
            found.append(_factory(str(raw), Path.cwd()))
        elif path.suffix == ".onnx" or source_kind(raw) is not None:
            if not path.exists():
                raise OptionError(f"{path}: no such model")
            found.append(path)
        elif path.is_file():
            for line in path.read_text().splitlines():
                entry = line.strip()
                if not entry or entry.startswith("#"):
                    continue
                if source_kind(entry) == "factory":
                    found.append(_factory(entry, path.parent))
                    continue
                listed = (path.parent / entry) if not Path(entry).is_absolute() else Path(entry)
                if not listed.exists():
                    raise OptionError(f"{path}: lists {entry}, which does not exist")
                found.append(listed)
        else:
            raise OptionError(f"{path}: not a model, a folder or a list file")
    unique = list(dict.fromkeys(p if is_factory(p) else p.resolve() for p in found))
    if not unique:
        raise OptionError("no models found", hint="give .onnx files, folders that hold them, or a list file")
    return unique


def _factory(spec: str, base: Path) -> Path:
    """`file.py:factory` with its file made absolute (relative to `base`, a list file's folder),
    checked to exist; `package.module:factory` as written (the worker imports it)."""
    where, _, name = spec.rpartition(":")
    if not where.endswith(".py"):
        return Path(spec)
    file = Path(where) if Path(where).is_absolute() else base / where
    if not file.is_file():
        raise OptionError(f"{spec}: {file} does not exist")
    return Path(f"{file.resolve()}:{name}")


def is_factory(model: Path) -> bool:
    from deploycc.frontend import source_kind

    return source_kind(str(model)) == "factory"


def model_digest(model: Path) -> str:
    """What a cell's key holds of its model: the file's bytes, or for a factory its spelling and
    the source file it comes from (a changed factory runs again)."""
    import hashlib

    if not is_factory(model):
        return io.sha256_file(model)
    digest = hashlib.sha256(str(model).encode())
    origin = _factory_origin(model)
    if origin:
        digest.update(Path(origin).read_bytes())
    return digest.hexdigest()


def _factory_origin(model: Path) -> str | None:
    """The source file a factory comes from, found without importing it where it is a file."""
    import importlib.util

    where = str(model).rpartition(":")[0]
    if where.endswith(".py"):
        return where
    try:
        origin = getattr(importlib.util.find_spec(where), "origin", None)
    except (ImportError, ValueError):
        return None
    return origin if origin and Path(origin).is_file() else None


def model_stem(model: Path) -> str:
    """A model's name without its format: `resnet18` for resnet18.onnx, resnet18.pt2 or
    `zoo.py:resnet18` (a factory is named by its factory, which is what tells models apart)."""
    if is_factory(model):
        return str(model).rpartition(":")[2]
    return model.name.removesuffix(".onnx").removesuffix(".pt2")


def hints_path(model: Path) -> Path:
    if is_factory(model):  # beside the factory's source file, named by the factory
        origin = _factory_origin(model)
        folder = Path(origin).parent if origin else Path.cwd()
        return folder / f"{model_stem(model)}.hints.json"
    return model.with_name(model.name.removesuffix(".onnx") + ".hints.json")


def read_hints(model: Path) -> dict[str, Any]:
    """MODEL.hints.json beside a model, when there is one: {"shapes": {input: [dims]}, "inputs":
    "file.npz", "calibration": "folder"} (paths relative to the hints file). What a corpus knows of
    each model that its signature does not say: a static size for every dynamic dim, values the
    model takes, and samples to calibrate int8 on (`--precision int8`). The axes flags of `build`
    may be given per model too: "batch": N, "dynamic_batch": [MIN, OPT, MAX], "shape_ranges":
    {input: [[min dims], [opt dims], [max dims]]}."""
    import hashlib
    import json

    path = hints_path(model)
    if not path.is_file():
        return {}
    raw = _confined(path, path.name, "itself").read_bytes()
    try:
        data = json.loads(raw)
        shapes = {str(name): [d if isinstance(d, int) else str(d) for d in dims]
                  for name, dims in (data.get("shapes") or {}).items()}
        axes = _hinted_axes(data)
    except (ValueError, AttributeError, TypeError) as error:
        raise OptionError(f"{path}: not a hints file ({error})",
                          hint='expected {"shapes": {"x": [1, 3, 224, 224]}, "inputs": "x.npz"}') from None
    inputs = data.get("inputs")
    digest = hashlib.sha256(raw)
    if inputs:
        npz = _confined(path, str(inputs), "inputs")
        if not npz.is_file():
            raise OptionError(f"{path}: names inputs {inputs!r}, which does not exist")
        digest.update(npz.read_bytes())
    calibration = data.get("calibration")
    if calibration:
        folder = _confined(path, str(calibration), "calibration data")
        if not folder.is_dir():
            raise OptionError(f"{path}: names calibration data {calibration!r}, which is not a folder")
        for sample in sorted(folder.glob("*.npz")):
            digest.update(sample.read_bytes())
    return {"shapes": shapes, "inputs": str(path.parent / inputs) if inputs else None,
            "calibration": str(path.parent / calibration) if calibration else None,
            "hints_sha256": digest.hexdigest()[:16], **axes}


def _confined(hints: Path, named: str, what: str) -> Path:
    """A file a hints file names, kept to the hints file's folder: a corpus says what its models
    take, never where else on this machine to read (an absolute path, `..`, a symlink out are
    refused before anything is read)."""
    folder = hints.parent.resolve()
    file = hints.parent / named
    if not file.resolve().is_relative_to(folder):
        raise OptionError(f"{hints}: names {what} {named!r} outside its folder {folder}",
                          hint="keep a model's inputs and samples beside it")
    return file


def hinted_family(model: Path) -> str:
    """The family a model's hints name ("family": "timm"), and its exporter where they name one
    ("timm / dynamo"), for grouping the audit page; '' if none."""
    import json

    path = hints_path(model)
    try:
        data = json.loads(_confined(path, path.name, "itself").read_text()) if path.is_file() else {}
        family, exporter = data.get("family"), data.get("exporter")
    except (ValueError, AttributeError, OSError, OptionError):
        return ""
    if not isinstance(family, str):
        return ""
    return f"{family} / {exporter}" if isinstance(exporter, str) and exporter else family


def _hinted_axes(data: dict[str, Any]) -> dict[str, Any]:
    """A hints file's own axes flags ("batch", "dynamic_batch", "shape_ranges"), checked as the
    command line checks them; a malformed one is a ValueError."""
    axes: dict[str, Any] = {}
    if data.get("batch") is not None:
        if not isinstance(data["batch"], int) or data["batch"] < 1:
            raise ValueError(f"batch must be a positive integer, not {data['batch']!r}")
        axes["batch"] = data["batch"]
    if data.get("dynamic_batch") is not None:
        low, opt, high = (int(n) for n in data["dynamic_batch"])
        if not 1 <= low <= opt <= high:
            raise ValueError("dynamic_batch must be [MIN, OPT, MAX] with 1 <= MIN <= OPT <= MAX")
        axes["batch_range"] = (low, opt, high)
    ranges = {}
    for name, bounds in (data.get("shape_ranges") or {}).items():
        low_dims, opt_dims, high_dims = ([int(d) for d in dims] for dims in bounds)
        ranges[str(name)] = (low_dims, opt_dims, high_dims)
    if ranges:
        axes["shape_ranges"] = ranges
    return axes


def resolve_targets(names: Sequence[str], jetpack: str | None) -> list[Target]:
    from deploycc.targets import registry

    if not names:
        raise OptionError("no target given", hint="pass --target NAME (repeatable) or --target all")
    if "all" in names:
        return registry.list_targets()
    return [registry.resolve(name, jetpack) for name in names]


def plan(models: list[Path], targets: list[Target], options: AuditOptions, outdir: Path,
         jetpack: str | None) -> list[tuple[str, CellSpec]]:
    unknown = [s for s in options.stages if s not in STAGES]
    if unknown:
        raise OptionError(f"unknown stage {unknown[0]!r}", hint=f"stages: {', '.join(STAGES)}")
    version = _version()
    folders = cell_folders(models, targets)
    cells = []
    for model in models:
        digest = model_digest(model)
        hints = read_hints(model)
        for target in targets:
            axes = {"batch": options.batch, "fixed": dict(options.shapes), "batch_range": options.batch_range,
                    "shape_ranges": dict(options.shape_ranges)}
            spec = CellSpec(model=str(model), model_sha256=digest, target=target.name,
                            target_hash=target.spec_hash, stages=tuple(options.stages), jetpack=jetpack,
                            partition=options.partition, precision=options.precision,
                            max_drop=options.max_drop, metric=options.metric,
                            exporters=tuple(options.exporters), half_analysis=options.half_analysis,
                            **{**axes, **hints})
            # On Ray, a TensorRT cell's engine (an onnxruntime-gpu cell's session) is built, verified
            # and timed by the runner on a node offering the target; the user's --device-engine
            # replaces the target's own engine only when it is not the default (onnxruntime stands in).
            own = spec.needs_hardware(target.backend.engine_on_device) if options.executor == "ray" else None
            if own is not None:
                spec.device_engine = options.device_engine if options.device_engine != BOARD_ENGINE else own
            key = spec.key(version)
            spec.workdir = str(outdir / BUILDS / folders[(model, target.name)])
            spec.references, spec.exports = str(outdir / REFERENCES), str(outdir / EXPORTS / digest[:32])
            spec.proofs = str(outdir / PROOFS)
            cells.append((key, spec))
    return cells


BUILDS = "builds"  # under OUTDIR: one build folder per cell
REFERENCES = "references"  # under OUTDIR: the originals' outputs, shared by a model's cells
# under OUTDIR: a torch model's proven exports, shared by its cells while they run; a model's
# folder goes when its last cell of the run ends (exports of a large model take GBs: 9 GB for 50)
EXPORTS = "exports"
PROOFS = "proofs"  # under OUTDIR: the verdicts of rewrite proofs, shared by all cells
CELLS = "cells"  # under OUTDIR: each finished cell's result, by key (store.py)


def cell_folders(models: list[Path], targets: list[Target]) -> dict[tuple[Path, str], str]:
    """The build folder of each cell, named `<model stem>.<target>` so a person finds it (and
    audit.html can link to it). Two models of the same stem in different folders each get a short
    hash of their path appended, so cells never share a folder; names are compared case-folded,
    as a case-insensitive file system would."""
    import hashlib

    names = {(model, target.name): f"{model_stem(model)}.{target.name}"
             for model in models for target in targets}
    taken = Counter(name.casefold() for name in names.values())
    return {(model, target): name if taken[name.casefold()] == 1 else
            f"{name}.{hashlib.sha256(str(model).encode()).hexdigest()[:8]}"
            for (model, target), name in names.items()}


def _own_report(spec: CellSpec, result: CellResult, outdir: Path) -> dict[str, str]:
    """The report.md the cell's build wrote, relative to OUTDIR (where audit.html is, so the folder
    can be moved), with its sha256: the host-segments build's for a cell deployed that way."""
    workdir = Path(spec.workdir)
    candidates = [workdir / "partition" / "report.md"] if result.status == HOST_SEGMENTS else []
    for candidate in [*candidates, workdir / "report.md"]:
        if candidate.is_file():
            return {"report": candidate.relative_to(outdir).as_posix(),
                    "report_sha256": io.sha256_file(candidate)}
    return {}


REPORTS = ("report.md", "report.json")


def _keep_reports_only(workdir: Path) -> None:
    """A cell's build folder with its reports alone (and its host-segments build's)."""
    if not workdir.is_dir():
        return
    for item in workdir.rglob("*"):
        if item.is_file() and item.name not in REPORTS:
            item.unlink()
    folders = sorted((p for p in workdir.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for folder in folders:  # the deepest first, so that a parent emptied by its children goes too
        if not any(folder.iterdir()):
            folder.rmdir()


def _drop_stale_report(result: CellResult, outdir: Path) -> None:
    """A cell reused from an earlier run links its report only while the folder still holds it: a
    run with other options (another key) builds into the same `<model>.<target>` folder."""
    link = result.details.get("report")
    if link is None:
        return
    path = outdir / str(link)
    if not path.is_file() or io.sha256_file(path) != result.details.get("report_sha256"):
        result.details.pop("report", None)
        result.details.pop("report_sha256", None)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("deploycc")
    except metadata.PackageNotFoundError:
        return "unknown"


def run_local(cells: list[tuple[str, CellSpec]], options: AuditOptions,
              done: Callable[[str, CellResult], None]) -> None:
    from deploycc.audit.zygote import zygote
    from deploycc.frontend import source_kind

    if not cells:
        return
    memory = options.memory_limit_mb << 20 if options.memory_limit_mb else None
    torch = any(source_kind(spec.model) is not None for _, spec in cells)
    with _cell_environment(options.jobs), zygote(torch=torch) as forks, \
            ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = {pool.submit(run_isolated, spec, timeout=options.timeout, memory_limit=memory,
                               worker=options.worker or WORKER, zygote=forks): key for key, spec in cells}
        for future in as_completed(futures):
            done(futures[future], future.result())


# glibc's malloc in the cells' processes (the zygote and the workers it forks read it at their
# start): freed memory is kept for the next allocation, not handed back to the kernel and faulted
# in again, zeroed, a page at a time. A cell allocates and frees gigabytes (a model read, parsed,
# its activations fetched); 8 zoo cells took 89 s with 8.9 M page faults and 75 s with 6.3 M so.
CELL_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),  # glibc's largest: below it, from the heap
               "MALLOC_TRIM_THRESHOLD_": str(4 << 30), "MALLOC_TOP_PAD_": str(64 << 20)}


@contextlib.contextmanager
def _cell_environment(jobs: int) -> Iterator[None]:
    """What the cells' processes inherit, unless the user set it: THREADS_ENV, the cores an ORT
    session that would take every core takes (`jobs` cells side by side, each on all cores, slow
    each other down), and CELL_MALLOC."""
    import os

    from deploycc.verify.runner import THREADS_ENV

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    wanted = {THREADS_ENV: str(max(1, cores // max(1, jobs))), **CELL_MALLOC}
    added = {name: value for name, value in wanted.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def audit(paths: Sequence[str | Path], target_names: Sequence[str], outdir: str | Path,
          options: AuditOptions | None = None, *, jetpack: str | None = None,
          progress: Callable[[Counter[str], int], None] | None = None,
          finished: Callable[[CellResult, int, int], None] | None = None) -> AuditReport:
    """`progress(counts by status, total)` as cells finish; `finished(cell, done, total)` with each
    cell that ran (not those reused)."""
    options = options or AuditOptions()
    out = Path(outdir)
    models = discover(paths)
    # the folders a run empties or replaces never hold a model of the corpus
    io.refuse_inputs([out / name for name in (BUILDS, EXPORTS, PROOFS, REFERENCES, CELLS)],
                     [m for m in models if not is_factory(m)])
    if out.exists() and not out.is_dir():
        raise OptionError(f"{out}: exists and is not a directory", hint="give -o a folder")
    if options.stored_only:  # a report of another audit's cells as it runs: it writes no cell
        return _audit(models, target_names, out, options, jetpack, progress, finished)
    with io.output_lock(out):  # two audits into one OUTDIR would each take the other's cells
        # what cells killed in an earlier run left (the resume runs them again in fresh folders)
        io.remove_stale_partials(out / BUILDS)
        return _audit(models, target_names, out, options, jetpack, progress, finished)


def _audit(models: list[Path], target_names: Sequence[str], out: Path, options: AuditOptions,
           jetpack: str | None, progress: Callable[[Counter[str], int], None] | None,
           finished: Callable[[CellResult, int, int], None] | None) -> AuditReport:
    started = time.perf_counter()
    targets = resolve_targets(target_names, jetpack)
    store = CellStore(out / CELLS)
    cells = plan(models, targets, options, out, jetpack)
    specs: dict[str, CellSpec] = {}
    for key, spec in cells:  # copies of a model (the same bytes) share a key: run once, shown for each
        specs.setdefault(key, spec)
    results, pending = _reuse_stored(specs, store, options, out)
    counts: Counter[str] = Counter(r.status for r in results.values())
    exporting = Counter(spec.exports for _, spec in pending)

    def done(key: str, result: CellResult) -> None:
        exporting[specs[key].exports] -= 1
        if exporting[specs[key].exports] == 0:
            shutil.rmtree(specs[key].exports, ignore_errors=True)
        if options.reports_only:
            _keep_reports_only(Path(specs[key].workdir))
        result.details.update(_own_report(specs[key], result, out))
        store.put(key, result)
        results[key] = result
        counts[result.status] += 1
        if finished is not None:
            finished(result, sum(counts.values()), len(specs))
        if progress is not None:
            progress(counts, len(specs))

    if progress is not None:
        progress(counts, len(specs))
    _run_cells(pending, options, done)
    for result in results.values():
        _drop_stale_report(result, out)
    report = _matrix_report(models, targets, cells, results, options, out, started)
    write_reports(report, out)
    return report


def _reuse_stored(specs: dict[str, CellSpec], store: CellStore, options: AuditOptions, out: Path,
                  ) -> tuple[dict[str, CellResult], list[tuple[str, CellSpec]]]:
    """The cells an earlier run stored (none with --fresh), and the cells left to run (none with
    --stored-only)."""
    results: dict[str, CellResult] = {}
    pending = []
    if options.fresh:  # exports and proofs made by the deploycc of an earlier run are made again
        shutil.rmtree(out / EXPORTS, ignore_errors=True)
        shutil.rmtree(out / PROOFS, ignore_errors=True)
    for key, spec in specs.items():
        cached = None if options.fresh else store.get(key)
        if cached is not None:
            results[key] = cached
        elif not options.stored_only:
            pending.append((key, spec))
            # a cell run again starts with no folder, so a report.md found there after it is its own
            shutil.rmtree(spec.workdir, ignore_errors=True)
    return results, pending


def _run_cells(pending: list[tuple[str, CellSpec]], options: AuditOptions,
               done: Callable[[str, CellResult], None]) -> None:
    if options.executor == "ray":
        from deploycc.audit.ray_executor import run_ray

        run_ray(pending, options, done)
    elif options.executor == "local":
        run_local(pending, options, done)
    else:
        raise OptionError(f"unknown executor {options.executor!r}", hint="local or ray")


def _matrix_report(models: list[Path], targets: list[Target], cells: list[tuple[str, CellSpec]],
                   results: dict[str, CellResult], options: AuditOptions, out: Path,
                   started: float) -> AuditReport:
    """The matrix in the planned order, each copy of a model shown under its own path, summarized."""
    if options.stored_only:  # a model some of whose targets have no stored cell is left out whole
        complete = Counter(str(spec.model) for key, spec in cells if key in results)
        cells = [(key, spec) for key, spec in cells if complete[str(spec.model)] == len(targets)]
        models = [model for model in models if complete[str(model)] == len(targets)]
    ordered = [dataclasses.replace(results[key], model=spec.model) for key, spec in cells]  # a copy's path
    names = [t.name for t in targets]
    summary, top_failures = summarize(ordered, names)
    return AuditReport(outdir=str(out), models=[str(m) for m in models], targets=names,
                       families={str(m): family for m in models if (family := hinted_family(m))},
                       stages=list(options.stages), cells=ordered, summary=summary,
                       top_failures=top_failures,
                       counts=dict(Counter(r.status for r in ordered)),
                       seconds=round(time.perf_counter() - started, 3),
                       reused=sum(1 for r in ordered if r.cached))
