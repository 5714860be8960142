"""ai.onnx.ml ops into standard ONNX, checked against ONNX Runtime's ML kernels."""

from __future__ import annotations

import pytest

from tests.rules.helpers import declines, rewrite_and_compare

HEADER = '<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml" : 3]>'
# Two trees over 3 features: tree 0 of depth 2 (one side a leaf at depth 1), tree 1 a stump.
TREES = """
    nodes_treeids = [0, 0, 0, 0, 0, 1, 1, 1],
    nodes_nodeids = [0, 1, 2, 3, 4, 0, 1, 2],
    nodes_featureids = [0, 2, 0, 0, 0, 1, 0, 0],
    nodes_values = [0.25, -0.5, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0],
    nodes_modes = ["{mode}", "{mode}", "LEAF", "LEAF", "LEAF", "{mode}", "LEAF", "LEAF"],
    nodes_truenodeids = [1, 3, 0, 0, 0, 1, 0, 0],
    nodes_falsenodeids = [2, 4, 0, 0, 0, 2, 0, 0],
    target_treeids = [0, 0, 0, 0, 0, 1, 1, 1, 1],
    target_nodeids = [2, 3, 4, 2, 3, 1, 2, 1, 2],
    target_ids = [0, 0, 0, 1, 1, 0, 0, 1, 1],
    target_weights = [1.5, -2.0, 0.75, 3.0, 0.5, 0.25, -1.25, 2.0, 4.0],
    n_targets = 2"""


@pytest.mark.parametrize(("mode", "aggregate", "post"), [
    ("BRANCH_LEQ", "SUM", "NONE"), ("BRANCH_LT", "AVERAGE", "NONE"), ("BRANCH_GTE", "SUM", "LOGISTIC"),
    ("BRANCH_GT", "SUM", "NONE"),
])
def test_tree_ensemble_regressor(mode: str, aggregate: str, post: str) -> None:
    attributes = TREES.format(mode=mode) + f', aggregate_function = "{aggregate}", ' \
        f'post_transform = "{post}", base_values = [0.5, -0.5]'
    rewrite_and_compare(f"""
        {HEADER}
        g (float[5,3] x) => (float[5,2] y) {{ y = ai.onnx.ml.TreeEnsembleRegressor<{attributes}>(x) }}
    """, "TreeEnsembleRegressor", "tree-ensemble-regressor", atol=1e-5, rtol=1e-5, seeds=(11, 12, 13))


def test_tree_ensemble_regressor_on_thresholds_hit_exactly() -> None:
    """Rows equal to a threshold take the branch the mode says (LEQ: true; LT: false)."""
    import numpy as np

    x = np.array([[0.25, 0.1, -0.5], [0.25, 0.2, 0.0], [0.3, 0.1, -0.6]], np.float32)
    for mode in ("BRANCH_LEQ", "BRANCH_LT"):
        rewrite_and_compare(f"""
            {HEADER}
            g (float[3,3] x) => (float[3,2] y) {{
                y = ai.onnx.ml.TreeEnsembleRegressor<{TREES.format(mode=mode)}>(x)
            }}
        """, "TreeEnsembleRegressor", "tree-ensemble-regressor", atol=1e-6, rtol=1e-6, feeds={"x": x})


@pytest.mark.parametrize("opset", [17, 11])
def test_tree_ensemble_regressor_sends_a_missing_feature_where_each_node_says(opset: int) -> None:
    """LightGBM and XGBoost write nodes_missing_value_tracks_true: a NaN feature takes the true
    branch at those nodes and the false one elsewhere (NaN compares false), below opset 12 too,
    where LessOrEqual is written as not Greater (which NaN would make true)."""
    import numpy as np

    nan = np.nan
    tracks = ", nodes_missing_value_tracks_true = [1, 0, 0, 0, 0, 0, 0, 0]"
    x = np.array([[nan, 0.2, -0.6], [0.1, nan, nan], [nan, nan, nan], [0.3, 0.0, -0.4], [0.2, 0.5, nan]],
                 np.float32)
    rewrite_and_compare(f"""
        <ir_version: 8, opset_import: ["" : {opset}, "ai.onnx.ml" : 3]>
        g (float[5,3] x) => (float[5,2] y) {{
            y = ai.onnx.ml.TreeEnsembleRegressor<{TREES.format(mode="BRANCH_LEQ") + tracks}>(x)
        }}
    """, "TreeEnsembleRegressor", "tree-ensemble-regressor", atol=1e-6, rtol=1e-6, feeds={"x": x})


def test_tree_ensemble_regressor_declines_mixed_modes() -> None:
    attributes = TREES.format(mode="BRANCH_LEQ").replace('"LEAF", "BRANCH_LEQ"', '"LEAF", "BRANCH_EQ"')
    declines(f"""
        {HEADER}
        g (float[5,3] x) => (float[5,2] y) {{ y = ai.onnx.ml.TreeEnsembleRegressor<{attributes}>(x) }}
    """, "TreeEnsembleRegressor", "branch modes")


def test_scaler() -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[5,3] x) => (float[5,3] y) {{
            y = ai.onnx.ml.Scaler<offset = [0.5, -1.0, 2.0], scale = [2.0, 0.25, -1.5]>(x)
        }}
    """, "Scaler", "scaler", atol=1e-6, rtol=1e-6)


def test_array_feature_extractor() -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[5,4] x) => (float[5,2] y) {{
            indices = Constant<value = int64[2] {{3, 1}}>()
            y = ai.onnx.ml.ArrayFeatureExtractor(x, indices)
        }}
    """, "ArrayFeatureExtractor", "array-feature-extractor", atol=0, rtol=0)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
def test_linear_classifier(post: str) -> None:
    coefficients = ", ".join(str(round(0.1 * (i - 5), 2)) for i in range(12))
    rewrite_and_compare(f"""
        {HEADER}
        g (float[6,4] x) => (int64[6] label, float[6,3] scores) {{
            label, scores = ai.onnx.ml.LinearClassifier<classlabels_ints = [7, 8, 9],
                coefficients = [{coefficients}], intercepts = [0.1, -0.2, 0.3],
                post_transform = "{post}">(x)
        }}
    """, "LinearClassifier", "linear-classifier", atol=1e-5, rtol=1e-5)


def test_linear_classifier_declines_string_labels() -> None:
    declines(f"""
        {HEADER}
        g (float[6,2] x) => (string[6] label, float[6,2] scores) {{
            label, scores = ai.onnx.ml.LinearClassifier<classlabels_strings = ["a", "b"],
                coefficients = [1.0, 2.0, 3.0, 4.0], intercepts = [0.0, 1.0]>(x)
        }}
    """, "LinearClassifier", "integer class labels")


# Three classes on the same trees: class weights per leaf, as a scikit-learn forest writes them.
CLASS_TREES = TREES.split("    target_treeids")[0] + """
    class_treeids = [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
    class_nodeids = [2, 2, 3, 3, 4, 4, 4, 1, 1, 2, 2],
    class_ids = [0, 2, 1, 2, 0, 1, 2, 0, 2, 1, 2],
    class_weights = [0.5, 0.25, 0.75, 0.1, 0.2, 0.3, 0.4, 0.6, 0.15, 0.35, 0.05],
    classlabels_int64s = [3, 5, 9]"""


@pytest.mark.parametrize(("opset", "post"), [(17, "NONE"), (17, "SOFTMAX"), (9, "LOGISTIC")])
def test_tree_ensemble_classifier(opset: int, post: str) -> None:
    """Opset 9 (what skl2onnx writes) has no GatherElements: the walk picks features by Where."""
    attributes = CLASS_TREES.format(mode="BRANCH_LEQ") + f', post_transform = "{post}"' + \
        (", base_values = [0.1, -0.2, 0.05]" if post != "NONE" else "")
    rewrite_and_compare(f"""
        <ir_version: 8, opset_import: ["" : {opset}, "ai.onnx.ml" : 1]>
        g (float[7,3] x) => (int64[7] label, float[7,3] scores) {{
            label, scores = ai.onnx.ml.TreeEnsembleClassifier<{attributes}>(x)
        }}
    """, "TreeEnsembleClassifier", "tree-ensemble-classifier", atol=1e-6, rtol=1e-6, seeds=(11, 12, 13))


# The binary form LightGBM's and XGBoost's converters write: one weight per leaf, for class 0.
BINARY_TREES = TREES.split("    target_treeids")[0] + """
    class_treeids = [0, 0, 0, 1, 1],
    class_nodeids = [2, 3, 4, 1, 2],
    class_ids = [0, 0, 0, 0, 0],
    class_weights = {weights},
    classlabels_int64s = [0, 1]"""


MARGINS = "[0.5, -1.25, 0.75, 0.25, -0.5]"


@pytest.mark.parametrize(("post", "base"), [("LOGISTIC", ""), ("NONE", ", base_values = [0.3]")])
def test_tree_ensemble_classifier_scores_two_classes_as_onnx_runtime(post: str, base: str) -> None:
    """ONNX Runtime's binary case on margins (LightGBM's and XGBoost's form): label 1 past 0,
    scores [-s, s], or [sigmoid(-s), sigmoid(s)] with LOGISTIC."""
    import numpy as np

    attributes = BINARY_TREES.format(mode="BRANCH_LEQ", weights=MARGINS) + f', post_transform = "{post}"'
    attributes += base
    x = np.array([[0.3, 0.2, -0.6], [0.1, 0.0, 0.0], [0.2, 0.5, -0.4], [0.25, 0.1, -0.5], [np.nan, 1.0, 2.0]],
                 np.float32)
    for feeds in ({"x": x}, None):
        rewrite_and_compare(f"""
            <ir_version: 8, opset_import: ["" : 15, "ai.onnx.ml" : 1]>
            g (float[5,3] x) => (int64[5] label, float[5,2] scores) {{
                label, scores = ai.onnx.ml.TreeEnsembleClassifier<{attributes}>(x)
            }}
        """, "TreeEnsembleClassifier", "tree-ensemble-classifier", atol=1e-6, rtol=1e-6, feeds=feeds)


@pytest.mark.parametrize(("attributes", "reason"), [
    (CLASS_TREES.format(mode="BRANCH_LEQ").replace("[3, 5, 9]", "[3, 5]").replace(
        "class_ids = [0, 2, 1, 2, 0, 1, 2, 0, 2, 1, 2]", "class_ids = [0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1]"),
     "weights are all for the first class"),
    (BINARY_TREES.format(mode="BRANCH_LEQ", weights="[0.125, 0.25, 0.375, 0.25, 0.5]"),
     "some weight negative"),
])
def test_tree_ensemble_classifier_declines_binary_forms_onnx_runtime_scores_otherwise(attributes: str,
                                                                                       reason: str) -> None:
    declines(f"""
        {HEADER}
        g (float[7,3] x) => (int64[7] label, float[7,2] scores) {{
            label, scores = ai.onnx.ml.TreeEnsembleClassifier<{attributes}>(x)
        }}
    """, "TreeEnsembleClassifier", reason)


@pytest.mark.parametrize("dtype", ["int64", "float"])
def test_one_hot_encoder(dtype: str) -> None:
    """Categories 0..3 with values drawn in 0..5: rows of unknown categories are zeros (zeros=1);
    float values are truncated to int64 first, as ONNX Runtime's kernel does."""
    rewrite_and_compare(f"""
        {HEADER}
        g ({dtype}[6,2] x) => (float[6,2,4] y) {{
            y = ai.onnx.ml.OneHotEncoder<cats_int64s = [0, 1, 2, 3], zeros = 1>(x)
        }}
    """, "OneHotEncoder", "one-hot-encoder", atol=0, rtol=0, int_high=6)


def test_one_hot_encoder_declines_string_categories() -> None:
    declines(f"""
        {HEADER}
        g (string[6,1] x) => (float[6,1,2] y) {{
            y = ai.onnx.ml.OneHotEncoder<cats_strings = ["a", "b"]>(x)
        }}
    """, "OneHotEncoder", "integer categories")


def test_array_feature_extractor_of_a_vector_by_computed_indices() -> None:
    """A k-NN's labels (rank 1, constant) picked by TopK indices ([rows, k], computed): ONNX Runtime
    returns one row of rows * k labels."""
    rewrite_and_compare(f"""
        {HEADER}
        g (float[5,4] x) => (int64[1,10] y) {{
            labels = Constant<value = int64[4] {{7, 8, 9, 10}}>()
            k = Constant<value = int64[1] {{2}}>()
            values, indices = TopK<axis = 1>(x, k)
            y = ai.onnx.ml.ArrayFeatureExtractor(labels, indices)
        }}
    """, "ArrayFeatureExtractor", "array-feature-extractor", atol=0, rtol=0)


@pytest.mark.parametrize(("norm", "opset"), [("MAX", 17), ("L1", 17), ("L2", 17), ("L1", 9)])
def test_normalizer(norm: str, opset: int) -> None:
    """Rows of zeros, of negatives, and a row whose max is 0 while others are negative; at
    opset 9 (skl2onnx's) without a float Equal."""
    import numpy as np

    header = HEADER.replace('"" : 17', f'"" : {opset}')
    x = np.array([[0, 0, 0], [1, -2, 3], [-1, -2, -4], [0, -1, -2], [0.5, 0.25, 0]], np.float32)
    rewrite_and_compare(f"""
        {header}
        g (float[5,3] x) => (float[5,3] y) {{ y = ai.onnx.ml.Normalizer<norm = "{norm}">(x) }}
    """, "Normalizer", "normalizer", atol=1e-6, rtol=1e-6, feeds={"x": x})
    rewrite_and_compare(f"""
        {header}
        g (float[5,3] x) => (float[5,3] y) {{ y = ai.onnx.ml.Normalizer<norm = "{norm}">(x) }}
    """, "Normalizer", "normalizer", atol=1e-6, rtol=1e-6)


def test_a_tree_walk_below_opset_9_is_declined_with_the_flag_that_converts_the_model() -> None:
    """onnxmltools writes LightGBM's regressors at opset 8, where there is no Where to walk with."""
    declines(f"""
        <ir_version: 8, opset_import: ["" : 8, "ai.onnx.ml" : 1]>
        g (float[5,3] x) => (float[5,2] y) {{
            y = ai.onnx.ml.TreeEnsembleRegressor<{TREES.format(mode="BRANCH_LEQ")}>(x)
        }}
    """, "TreeEnsembleRegressor", "--opset 9")
