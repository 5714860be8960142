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


# onnxmltools writes LightGBM's regressors at opset 8, below the tree walk's Where (opset 9)
TREES_AT_8 = """
<ir_version: 8, opset_import: ["" : 8, "ai.onnx.ml" : 1]>
g (float[4,2] x) => (float[4,1] y) {
    y = ai.onnx.ml.TreeEnsembleRegressor<nodes_treeids = [0, 0, 0], nodes_nodeids = [0, 1, 2],
        nodes_featureids = [1, 0, 0], nodes_values = [0.5, 0.0, 0.0],
        nodes_modes = ["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids = [1, 0, 0],
        nodes_falsenodeids = [2, 0, 0], nodes_missing_value_tracks_true = [1, 0, 0],
        target_treeids = [0, 0], target_nodeids = [1, 2], target_ids = [0, 0],
        target_weights = [-1.5, 2.25], n_targets = 1>(x)
}
"""


def test_a_model_inside_the_range_goes_up_to_the_opset_its_rewrite_needs(write_model, tmp_path) -> None:
    """Inside the Xavier's range (7-17) at opset 8, the tree ensemble the Xavier lacks is written
    by a walk that needs opset 9: the model goes to 9 and legalizes; ORT, which runs it, keeps 8."""
    model = write_model(TREES_AT_8)
    report = api.legalize(model, "jetson-xavier", tmp_path / "xavier.onnx")
    assert report.success, report.summary
    opset = next(record for record in report.passes if record.name == "opset")
    assert any(note.startswith("converted opset 8 -> 9") for note in opset.notes), opset.notes
    assert [r.rule for r in report.rewrites] == ["tree-ensemble-regressor"]
    kept = api.legalize(model, "ort-cpu", tmp_path / "ort.onnx")
    assert kept.success and not any(record.name == "opset" and record.notes for record in kept.passes)


# NaFlexViT resizes its position embedding (an initializer) with Resize 18's antialias
ANTIALIASED_CONSTANT = f"""
<ir_version: 10, opset_import: ["" : 18]>
g (float[1,2,4,4] x) => (float[1,2,4,4] y)
<float[1,2,6,6] table = {{{", ".join(f"{v}.0" for v in range(72))}}}, int64[4] sizes = {{1, 2, 4, 4}}> {{
    resized = Resize <mode = "cubic", antialias = 1, cubic_coeff_a = -0.5, exclude_outside = 1>
                     (table, , , sizes)
    y = Add(x, resized)
}}
"""


def test_a_constant_node_in_a_form_the_older_opset_lacks_is_folded_before_converting_down(
        write_model, tmp_path) -> None:
    """onnx's converter cannot take Resize 18 with antialias below 18; on constants its value is
    all the Xavier (opsets up to 17) needs. Verified against the original on ORT."""
    report = api.legalize(write_model(ANTIALIASED_CONSTANT), "jetson-xavier", tmp_path / "out.onnx")
    assert report.success, report.summary
    opset = next(record for record in report.passes if record.name == "opset")
    assert any(note.startswith("folded before converting down") and "Resize ×1" in note
               for note in opset.notes), opset.notes
    assert "converted opset 18 -> 17" in opset.notes
