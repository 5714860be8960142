"""Run a partitioned model: its segments in order, each on its own runner, the cut tensors
handed from one to the next.

    chain = Chain.load("out/segments")          # every segment on ONNX Runtime CPU
    outputs = chain.run({"x": array})
    chain.seconds                                # per segment, of the last run

A runner is anything with `run(feeds) -> {name: array}` and `close()`: the built engines
(`backends.*.Runner`) for device segments, an ONNX Runtime CPU session for host segments.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import ModelInputError

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np


class OrtCpuRunner:
    """One segment on ONNX Runtime CPU, as it runs a host segment."""

    def __init__(self, path: Path) -> None:
        from deploycc.verify.runner import session

        self._session = session(path, optimize=True, threads=0)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from deploycc.verify.runner import run_session

        return run_session(self._session, dict(feeds))

    def close(self) -> None:
        self._session = None


@dataclass
class Chain:
    folder: Path
    pipeline: dict[str, Any]
    runners: dict[int, Any]
    seconds: dict[int, float] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: str | Path, runners: Mapping[int, Any] | None = None) -> Chain:
        """The pipeline in `folder`; segments without a runner given run on ONNX Runtime CPU."""
        folder = Path(folder)
        try:
            pipeline = json.loads((folder / "pipeline.json").read_text())
        except (OSError, ValueError) as error:
            raise ModelInputError(f"{folder}: not a partitioned model ({error})") from None
        given = dict(runners or {})
        chosen = {s["index"]: given.get(s["index"]) or OrtCpuRunner(folder / s["file"])
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
