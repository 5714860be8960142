"""Leaf helpers on an onnx-ir graph, imported by every layer above: walking graphs and their
subgraphs, dims and constants (`graphs`), and ONNX shape inference (`shapes`). They import only
`io`, `dtypes` and `errors`."""
