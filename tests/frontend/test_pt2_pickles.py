"""A `.pt2` is opened without running code it brings: a real torch.export.save archive, rewritten
the way an attacker would (a pickle in place of a weight, of the sample inputs, of a constant; a
shape expression, guard, string or pytree context that torch evaluates), is refused with exit 2
and one line, and the pickle's payload (it writes a marker file) never runs."""

from __future__ import annotations

import io
import json
import pickle
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch (make test installs it)")

from deploycc import api  # noqa: E402
from deploycc.errors import ModelInputError  # noqa: E402
from deploycc.frontend import pt2_archive  # noqa: E402
from deploycc.frontend.sources import load_source  # noqa: E402

Members = dict[str, bytes]
MODEL_JSON = "net/models/model.json"


class Payload:
    """Unpickled, it opens (creates) `marker` for writing: the proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.marker), "w")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch.export.save's archive of a tiny module with a dynamic batch (its shapes are sympy)."""
    batch = torch.export.Dim("batch", min=1, max=16)
    program = torch.export.export(Net(), (torch.randn(2, 4),), dynamic_shapes={"x": {0: batch}})
    path = tmp_path_factory.mktemp("honest") / "net.pt2"
    torch.export.save(program, str(path))
    return path


def rewritten(honest: Path, tmp_path: Path, edit: Callable[[Members, Path], None]) -> tuple[Path, Path]:
    """`honest` with `edit` applied to its members; and the marker file a payload would write."""
    marker = tmp_path / "code-ran"
    with zipfile.ZipFile(honest) as source:
        members = {info.filename: source.read(info) for info in source.infolist()}
    edit(members, marker)
    path = tmp_path / "net.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path, marker


def saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def pickled_weight(members: Members, marker: Path) -> None:
    config_name = "net/data/weights/model_weights_config.json"
    config = json.loads(members[config_name])
    config["config"]["fc.bias"]["use_pickle"] = True
    members[config_name] = json.dumps(config).encode()
    members["net/data/weights/" + config["config"]["fc.bias"]["path_name"]] = saved(Payload(marker))


def pickled_sample_inputs(members: Members, marker: Path) -> None:
    members["net/data/sample_inputs/model.pt"] = saved(Payload(marker))


def sample_inputs_in_other_case(members: Members, marker: Path) -> None:
    # torch's reader finds DATA/... when asked for data/...; zipfile does not
    del members["net/data/sample_inputs/model.pt"]
    members["net/DATA/sample_inputs/model.pt"] = saved(Payload(marker))


def opaque_constant(members: Members, marker: Path) -> None:
    config = {"config": {"c": {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                               "tensor_meta": None}}}
    members["net/data/constants/model_constants_config.json"] = json.dumps(config).encode()
    members["net/data/constants/opaque_obj_0"] = pickle.dumps(Payload(marker))


def program_edit(edit: Callable[[dict, Path], None]) -> Callable[[Members, Path], None]:
    def apply(members: Members, marker: Path) -> None:
        program = json.loads(members[MODEL_JSON])
        edit(program, marker)
        members[MODEL_JSON] = json.dumps(program).encode()
    return apply


def _shape_expression(program: dict, marker: Path) -> None:
    payload = f"open({str(marker)!r}, 'w') or Symbol("
    text = json.dumps(program).replace('"expr_str": "Symbol(', f'"expr_str": "{payload}', 1)
    program.clear()
    program.update(json.loads(text))


def _guard(program: dict, marker: Path) -> None:
    program["guards_code"] = [f"open({str(marker)!r}, 'w') is not None"]


def _enum_module(program: dict, marker: Path) -> None:
    signature = program["graph_module"]["module_call_graph"][0]["signature"]
    spec = json.loads(signature["in_spec"])
    enum = {"__enum__": True, "fqn": "deploycc_evil:E", "name": "A"}  # importing deploycc_evil runs it
    spec[1]["children_spec"][1]["context"] = json.dumps([enum])
    signature["in_spec"] = json.dumps(spec)


def _quoted_string(program: dict, marker: Path) -> None:
    program["graph_module"]["graph"]["nodes"][0]["inputs"].append(
        {"name": "pad", "arg": {"as_string": "' or open('x') or '"}, "kind": 1})


def _operator(program: dict, marker: Path) -> None:
    program["graph_module"]["graph"]["nodes"][0]["inputs"].append(
        {"name": "fn", "arg": {"as_operator": "torch.serialization.os.system"}, "kind": 1})


def quoted_key(members: Members, marker: Path) -> None:
    # plain data to the weights-only unpickler, but torch pastes input keys into its guards' source
    inputs = ((torch.randn(2, 4),), {"x'); open('x": torch.ones(1)})
    members["net/data/sample_inputs/model.pt"] = saved(inputs)


def duplicate(members: Members, marker: Path) -> None:
    members["net/Data/sample_inputs/model.pt"] = saved(Payload(marker))


def aotinductor(members: Members, marker: Path) -> None:
    members["net/data/aotinductor/model/model.so"] = b"\x7fELF"


REFUSED = {
    "pickled weight": (pickled_weight, "asks to unpickle data/weights/weight_1"),
    "pickled sample inputs": (pickled_sample_inputs, "asks to unpickle data/sample_inputs/model.pt"),
    "sample inputs in another case": (sample_inputs_in_other_case, "unpickle data/sample_inputs/model.pt"),
    "opaque constant": (opaque_constant, "asks to unpickle data/constants/opaque_obj_0"),
    "shape expression": (program_edit(_shape_expression), "holds the shape expression"),
    "guard": (program_edit(_guard), "holds the guard"),
    "enum module": (program_edit(_enum_module), "holds the enum 'deploycc_evil:E'"),
    "quoted string": (program_edit(_quoted_string), "holds the string"),
    "operator": (program_edit(_operator), "holds the operator 'torch.serialization.os.system'"),
    "quoted key": (quoted_key, "has the key"),
    "member twice": (duplicate, "twice"),
    "compiled code": (aotinductor, "compiled AOTInductor code (data/aotinductor/model/model.so)"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_archive_that_would_run_code_is_refused_before_torch_reads_it(
        case: str, honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edit, expected = REFUSED[case]
    path, marker = rewritten(honest, tmp_path, edit)
    (tmp_path / "deploycc_evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # where `python -m` finds the enum's module: the cwd
    refused: ModelInputError | None = None
    try:
        load_source(path)
    except ModelInputError as error:
        refused = error
    assert not marker.exists(), "the archive's code ran"
    assert refused is not None and expected in refused.message and "\n" not in str(refused), refused
    assert refused.exit_code == 2


def test_torch_itself_runs_the_payloads(honest: Path, tmp_path: Path) -> None:
    """What the refusals above guard against: torch.export.load runs each pickle (so a fix in
    torch shows here, and the checks can be reconsidered)."""
    for edit in (pickled_weight, pickled_sample_inputs, opaque_constant):
        path, marker = rewritten(honest, tmp_path, edit)
        try:
            torch.export.load(str(path))
        except Exception:  # what the payload returned is no tensor: torch fails after it ran
            pass
        assert marker.exists(), edit.__name__
        marker.unlink()


def test_the_command_line_refuses_a_pickled_weight_in_one_line(honest: Path, tmp_path: Path) -> None:
    path, marker = rewritten(honest, tmp_path, pickled_weight)
    run = subprocess.run([sys.executable, "-m", "deploycc.cli", "check", str(path), "--target", "ort-cpu"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert not marker.exists(), "the archive's code ran"
    assert run.returncode == 2, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "asks to unpickle data/weights/weight_1, which could run code" in lines[0]
    assert "Traceback" not in run.stderr


def test_the_api_refuses_pickled_sample_inputs(honest: Path, tmp_path: Path) -> None:
    path, marker = rewritten(honest, tmp_path, pickled_sample_inputs)
    with pytest.raises(Exception) as refused:
        api.check(str(path), "ort-cpu")
    assert not marker.exists(), "the archive's code ran"
    assert isinstance(refused.value, ModelInputError), refused.value
    assert "asks to unpickle data/sample_inputs/model.pt" in refused.value.message


def test_honest_archives_load_guards_and_all(honest: Path, tmp_path: Path) -> None:
    """What torch.export.save writes passes: here a derived dim, whose guards torch prints as
    Python (and runs when the module is called)."""

    class Halves(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(x.shape[0] // 2, -1)

    rows = 2 * torch.export.Dim("rows", max=64)
    program = torch.export.export(Halves(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: rows}})
    assert program._guards_code, "torch no longer writes guards here: pick another model to show them"
    path = tmp_path / "halves.pt2"
    torch.export.save(program, str(path))
    source = load_source(path)
    assert source.module(torch.randn(8, 3)).shape == (4, 6)
    assert load_source(honest).names == ["x"]


# Where torch 2.x's loader unpickles, evaluates, imports or loads code, in the files the checks
# mirror: a torch that adds or moves one fails here, and pt2_archive.py / pt2_program.py are read
# against it again before the counts are updated.
TORCH_SITES = {
    "export/pt2_archive/_package.py": {"torch.load(": 3, "pickle.loads(": 1, "_pickle_load_obj(": 1,
                                       "_load_aoti(": 3},
    "_export/serde/serialize.py": {"torch.load(": 2, "sympify(": 1, "exec(": 1, "import_module(": 0},
    "export/_unlift.py": {"exec(": 1},
    "utils/_pytree.py": {"import_module(": 2},
}


def test_the_checks_cover_the_places_torch_runs_code() -> None:
    root = Path(torch.__file__).parent
    found = {file: {site: len(re.findall(re.escape(site), (root / file).read_text()))
                    for site in sites} for file, sites in TORCH_SITES.items()}
    assert found == TORCH_SITES, f"torch {torch.__version__} loads otherwise: review frontend/pt2_*.py"
    from torch.export.pt2_archive import constants

    pairs = {constants.MODELS_FILENAME_FORMAT: pt2_archive.MODELS,
             constants.SAMPLE_INPUTS_FILENAME_FORMAT: pt2_archive.SAMPLE_INPUTS,
             constants.WEIGHTS_CONFIG_FILENAME_FORMAT: pt2_archive.WEIGHTS_CONFIG,
             constants.CONSTANTS_CONFIG_FILENAME_FORMAT: pt2_archive.CONSTANTS_CONFIG,
             constants.AOTINDUCTOR_DIR: pt2_archive.AOTINDUCTOR_DIR,
             constants.TENSOR_CONSTANT_FILENAME_PREFIX: pt2_archive.TENSOR_CONSTANT,
             constants.CUSTOM_OBJ_FILENAME_PREFIX: pt2_archive.CUSTOM_OBJ,
             constants.OPAQUE_OBJ_FILENAME_PREFIX: pt2_archive.OPAQUE_OBJ}
    assert all(torch_name == ours for torch_name, ours in pairs.items()), pairs
