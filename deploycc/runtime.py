"""Run a partitioned model: its segments in order, each on its own runner, the cut tensors
handed from one to the next.

    chain = Chain.load("out")                   # `build --partition -o out`: out/segments,
                                                # every segment on ONNX Runtime CPU
    outputs = chain.run({"x": array})
    chain.seconds                                # per segment, of the last run

A runner is anything with `run(feeds) -> {name: array}` and `close()`: the built engines
(`backends.*.Runner`) for device segments, the ONNX Runtime backend's runner on CPU for host segments.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import ModelInputError
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np


PIPELINE_FILE, SEGMENTS_DIR = "pipeline.json", "segments"


def segments_folder(folder: str | Path) -> Path | None:
    """Where a partitioned model's pipeline.json is: `folder` itself (a segments/ folder) or the
    segments/ of a `build --partition` output directory; None when neither holds one."""
    folder = Path(folder)
    for candidate in (folder, folder / SEGMENTS_DIR):
        if (candidate / PIPELINE_FILE).is_file():
            return candidate
    return None


@dataclass
class Chain:
    folder: Path
    pipeline: dict[str, Any]
    runners: dict[int, Any]
    seconds: dict[int, float] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: str | Path, runners: Mapping[int, Any] | None = None) -> Chain:
        """The pipeline in `folder` (a segments/ folder, or the partitioned build holding one);
        segments without a runner given run on ONNX Runtime CPU."""
        found = segments_folder(folder)
        if found is None:
            raise ModelInputError(f"{folder}: not a partitioned model: no {PIPELINE_FILE} in it or in "
                                  f"its {SEGMENTS_DIR}/",
                                  hint="give the -o folder of `build --partition`, or its segments/")
        folder = found
        try:
            pipeline = json.loads((folder / PIPELINE_FILE).read_text())
        except (OSError, ValueError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ModelInputError(f"{folder / PIPELINE_FILE}: not a readable pipeline ({reason})") from None
        from deploycc.backends.onnxruntime import OrtRunner

        given = dict(runners or {})
        chosen = {s["index"]: given.get(s["index"]) or OrtRunner(folder / s["file"], ["CPUExecutionProvider"])
                  for s in pipeline["segments"]}
        return cls(folder, pipeline, chosen)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self.pipeline["inputs"] if name not in feeds]
        if missing:
            raise ModelInputError(f"missing inputs: {', '.join(missing)}")
        values: dict[str, np.ndarray] = dict(feeds)
        for segment in self.pipeline["segments"]:
            started = time.perf_counter()
            outputs = self.runners[segment["index"]].run({name: values[name] for name in segment["inputs"]})
            self.seconds[segment["index"]] = time.perf_counter() - started
            values.update({name: outputs[name] for name in segment["outputs"]})
        return {name: values[name] for name in self.pipeline["outputs"]}

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()


class ChainRunner:
    """A chain as one `backends.base.Runner` (what `bench` times), with the time of each segment."""

    load_seconds = 0.0

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self._runs: list[dict[int, float]] = []  # seconds per segment, run by run

    @property
    def input_names(self) -> list[str]:
        return list(self.chain.pipeline["inputs"])

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.chain.run(feeds)
        self._runs.append(dict(self.chain.seconds))
        return outputs

    def breakdown_ms(self, last: int | None = None) -> dict[str, float]:
        runs = self._runs[-last:] if last else self._runs
        placements = {s["index"]: s["placement"] for s in self.chain.pipeline["segments"]}
        return {f"segment {index} ({placements[index]})":
                round(sum(run[index] for run in runs) * 1e3 / max(len(runs), 1), 4)
                for index in sorted(placements) if runs}

    def close(self) -> None:
        self.chain.close()


def load_built_chain(build_dir: Path, target: Any, precision: Precision,
                     threads: int | None = None) -> ChainRunner:
    """The chain of a `build --partition` directory with each device segment on its engine."""
    from deploycc.backends.base import Artifact, BuildRequest
    from deploycc.backends.registry import get_backend

    folder = build_dir / SEGMENTS_DIR
    pipeline = json.loads((folder / PIPELINE_FILE).read_text())
    backend = get_backend(target.backend.kind)
    runners = {}
    for segment in pipeline["segments"]:
        built = segment.get("artifact")
        if segment["placement"] != "device" or not built:
            continue
        where = folder / f"{segment['index']:02d}"
        request = BuildRequest(model=folder / segment["file"], outdir=where, target=target,
                               precision=precision, threads=threads)
        runners[segment["index"]] = backend.load(Artifact(kind=built["kind"], files=built["files"],
                                                          settings=built.get("settings", {})), where, request)
    return ChainRunner(Chain.load(folder, runners))
