"""The engine traits the passes, the shape policy and the audit read are the target's data (its
`[backend]` table): every shipped target, at every JetPack release, has the values its backend
class gave before they moved (the table below was computed from those classes), so a variant that
`extends` a target of another kind (jetson-orin-ort) does not inherit the base's engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploycc.errors import TargetError
from deploycc.targets import registry
from deploycc.targets.loader import build_target
from deploycc.targets.schema import BackendSpec
from tests.targets.test_registry import MY_BOARD

# target: (subgraph_initializers, fuses_written_out_activations, fixed_shape_engines, builds_on_device,
#          builds_profiles, engine_on_device), as TensorRTBackend, OpenVinoBackend and
#          OnnxRuntimeBackend answered them before the traits became target data
TENSORRT = (False, True, True, True, True, "tensorrt")
ORT_TENSORRT_PROVIDER = (True, False, False, False, True, "onnxruntime-gpu")
EXPECTED = {
    "gpu-trt10": TENSORRT,
    "jetson-nano": TENSORRT,
    "jetson-xavier": TENSORRT,
    "jetson-orin": TENSORRT,
    "jetson-nano-ort": ORT_TENSORRT_PROVIDER,
    "jetson-xavier-ort": ORT_TENSORRT_PROVIDER,
    "jetson-orin-ort": ORT_TENSORRT_PROVIDER,
    "ort-trt": ORT_TENSORRT_PROVIDER,
    "openvino-cpu": (False, True, False, False, False, None),
    "ort-cpu": (True, False, False, False, False, None),
    "ort-cuda": (True, False, False, False, False, "onnxruntime-gpu"),
}


def _traits(backend: BackendSpec) -> tuple[bool, bool, bool, bool, bool, str | None]:
    return (backend.subgraph_initializers, backend.fuses_written_out_activations, backend.fixed_shape_engines,
            backend.builds_on_device, backend.builds_profiles, backend.engine_on_device)


def test_every_shipped_target_at_every_release_has_its_engines_traits() -> None:
    shipped = registry.list_targets()
    assert {t.name for t in shipped} == set(EXPECTED)
    for target in shipped:
        for release in target.jetpack.available if target.jetpack else (None,):
            resolved = build_target(Path(target.source_file), release)
            assert _traits(resolved.backend) == EXPECTED[target.name], (target.name, release)


def _board(traits: str) -> str:
    """test_registry's own board (a TensorRT one) with `traits` in its [backend] table."""
    return MY_BOARD.replace('version = "8.5.2"\n', f'version = "8.5.2"\n{traits}\n')


def test_a_target_file_states_its_traits_and_the_rest_take_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "my-board.toml"
    path.write_text(_board(""))
    assert _traits(registry.resolve(str(path)).backend) == (True, False, False, False, False, None)
    path.write_text(_board("subgraph_initializers = false\nbuilds_on_device = true"))
    stated = registry.resolve(str(path)).backend
    assert not stated.subgraph_initializers and stated.builds_on_device and not stated.fixed_shape_engines
    assert stated.engine_on_device == "tensorrt"
    path.write_text(_board('builds_on_device = "yes"'))
    with pytest.raises(TargetError, match=r"'backend\.builds_on_device'"):
        registry.resolve(str(path))
