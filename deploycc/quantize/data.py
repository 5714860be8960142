"""Calibration and validation samples for `--precision int8`: folders of .npz files (keys = the
model's input names, one sample or a batch each) or the API's iterable of dicts, checked against
the model's signature before any quantizer sees them.

A sample may hold arrays the model does not take (labels, for a metric function of the user's):
they travel with it. A batch whose leading dim is a multiple of the model's fixed batch is cut
into samples of that batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploycc.errors import OptionError

Sample = dict[str, np.ndarray]


@dataclass
class Signature:
    """An input's dtype and dims (an int, or a name for a dynamic dim)."""

    dtype: np.dtype
    dims: list[int | str]


@dataclass
class SampleSets:
    calibration: list[Sample]
    validation: list[Sample]
    notes: list[str] = field(default_factory=list)


def model_signature(model: Path) -> dict[str, Signature]:
    from deploycc import io

    graph = io.load(model, check=False).model.graph
    signature = {}
    for value in graph.inputs:
        if value.name in graph.initializers or value.dtype is None:
            continue
        dims: list[int | str] = [d if isinstance(d, int) else str(d) for d in (value.shape or [])]
        signature[value.name or ""] = Signature(np.dtype(value.dtype.numpy()), dims)
    return signature


def _read_folder(folder: Path, what: str) -> list[tuple[str, Sample]]:
    if not folder.is_dir():
        raise OptionError(f"{folder}: the {what} data is not a folder",
                          hint="give a folder of .npz files, one sample or a batch each, keyed by input name")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise OptionError(f"{folder}: no .npz files in the {what} folder",
                          hint="save each sample with numpy.savez(path, **{input_name: array})")
    from deploycc.verify.inputs import load_npz

    return [(file.name, load_npz(file)) for file in files]


def _checked(origin: str, sample: Mapping[str, Any], signature: dict[str, Signature]) -> list[Sample]:
    """The sample, checked against the signature, as one or more samples of the model's batch."""
    arrays = {name: np.asarray(value) for name, value in sample.items()}
    missing = [name for name in signature if name not in arrays]
    if missing:
        raise OptionError(f"{origin}: no array for input '{missing[0]}'",
                          hint=f"the model takes {', '.join(signature)}; the sample holds "
                               f"{', '.join(sorted(arrays)) or 'nothing'}")
    pieces = None
    for name, wanted in signature.items():
        array = arrays[name]
        if array.dtype != wanted.dtype:
            raise OptionError(f"{origin}: input '{name}' is {array.dtype}, the model takes {wanted.dtype}")
        if wanted.dims and array.ndim != len(wanted.dims):
            raise OptionError(f"{origin}: input '{name}' has shape {list(array.shape)}, the model takes "
                              f"rank {len(wanted.dims)} ({wanted.dims})")
        for axis, (have, want) in enumerate(zip(array.shape, wanted.dims, strict=False)):
            if not isinstance(want, int) or have == want:
                continue
            if axis == 0 and want > 0 and have % want == 0 and (pieces in (None, have // want)):
                pieces = have // want  # a batch of samples of the model's fixed batch
                continue
            raise OptionError(f"{origin}: input '{name}' has shape {list(array.shape)}, the model takes "
                              f"{wanted.dims}")
    if not pieces or pieces == 1:
        return [arrays]
    return [{name: (np.split(array, pieces)[index] if name in signature else array)
             for name, array in arrays.items()} for index in range(pieces)]


def _gather(source: Path | Iterable[Mapping[str, Any]], what: str,
            signature: dict[str, Signature]) -> list[Sample]:
    entries = _read_folder(source, what) if isinstance(source, Path) else \
        [(f"{what} sample {index}", sample) for index, sample in enumerate(source)]
    samples = [piece for origin, sample in entries for piece in _checked(origin, sample, signature)]
    if not samples:
        raise OptionError(f"no {what} samples", hint="give at least one sample")
    return samples


def load_sample_sets(model: Path, calibration: Path | Iterable[Mapping[str, Any]] | None,
                     validation: Path | Iterable[Mapping[str, Any]] | None) -> SampleSets:
    """The calibration and validation samples; without a validation set a fifth of the calibration
    samples (at least one, the last ones) is set apart for it, and said so."""
    if calibration is None:
        raise OptionError("--precision int8 needs calibration data",
                          hint="--calibration DIR: a folder of .npz files keyed by input name "
                               "(representative inputs, a few hundred at most)")
    signature = model_signature(model)
    calibrate = _gather(calibration, "calibration", signature)
    if validation is not None:
        return SampleSets(calibrate, _gather(validation, "validation", signature))
    if len(calibrate) < 2:
        return SampleSets(calibrate, calibrate, ["one calibration sample and no --validation: the accuracy "
                                                 "guard judges on the calibration sample itself"])
    held = max(1, len(calibrate) // 5)
    return SampleSets(calibrate[:-held], calibrate[-held:],
                      [f"no --validation: {held} of the {len(calibrate)} calibration samples were set "
                       f"apart to judge accuracy on"])
