"""The opset pass's notes (report.md's opset row) name each rule fired before converting down once,
with how many nodes it rewrote, not one note per node."""

from __future__ import annotations

from deploycc import api

OPSET_20 = """
<ir_version: 10, opset_import: ["" : 20]>
g (float[2,8] x) => (float[2,8] y) {
    a = Gelu(x)
    b = Gelu(a)
    c = Mish(b)
    y = Gelu(c)
}
"""


def test_rules_fired_before_converting_down_are_one_note_with_counts(write_model, tmp_path) -> None:
    report = api.legalize(write_model(OPSET_20), "jetson-xavier", tmp_path / "out.onnx")  # opsets up to 17
    assert report.success, report.summary
    opset = next(record for record in report.passes if record.name == "opset")
    rewrote = [note for note in opset.notes if note.startswith("rewrote before converting down")]
    assert rewrote == ["rewrote before converting down: gelu ×3, mish ×1"], opset.notes
    assert "converted opset 20 -> 17" in opset.notes
