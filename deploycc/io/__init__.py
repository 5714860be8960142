"""Model files in and out: the one place that reads and writes ONNX protobuf files, in three rooms.

Reading (read.py, with validate.py, node_order.py, map_types.py, checker.py): the protobuf is
parsed with external data left on disk, every external-data reference is validated (it must stay
inside the model's folder, name a real file, and agree with the tensor's shape) before onnx-ir
maps anything, and the graph is handed to the rest of deploycc as an `onnx_ir.Model` whose large
tensors stay memory-mapped.

Writing (write.py): a model saved atomically, weights streamed; a text file through a rename.

The file system (files.py): output directories staged beside their place and renamed into it,
sha256, tar. What may be written at all (outputs.py): never an input, an existing output only when
forced, under a lock beside it; a killed run's staging removed by the next.

Callers use the names below (`from deploycc import io; io.load(...)`); a constant a test changes
is changed on its own module (`deploycc.io.write.STREAM_TENSOR_BYTES`), where it is read.
"""

from deploycc.io.checker import LARGE_TENSOR_BYTES, check_proto, onnxruntime_loads
from deploycc.io.files import (
    StagedDirectory,
    copy_file,
    copy_model_file,
    scratch_folder,
    sha256_file,
    tar_folder,
)
from deploycc.io.map_types import MAP_TYPES, restore_map_types, strip_map_types
from deploycc.io.node_order import sort_topologically
from deploycc.io.outputs import (
    PARTIAL_MARK,
    OutputBusy,
    claim,
    model_files,
    output_lock,
    refuse_existing,
    refuse_inputs,
    remove_stale,
    remove_stale_partials,
    staging_prefix,
    written_files,
)
from deploycc.io.read import (
    PEEK_KEPT_BYTES,
    LoadedModel,
    ReadProto,
    copy_model,
    from_proto,
    load,
    peek,
    read_checked,
    read_proto,
    to_loaded,
    to_proto,
)
from deploycc.io.validate import (
    EXTERNAL_DATA_KEYS,
    MAX_DECLARED_ELEMENTS,
    ExternalFile,
    safe_location,
    validate_declared_dims,
    validate_external_data,
    validate_inline_tensors,
)
from deploycc.io.write import save, write_streamed, write_text_atomic

__all__ = [
    "EXTERNAL_DATA_KEYS",
    "LARGE_TENSOR_BYTES",
    "MAP_TYPES",
    "MAX_DECLARED_ELEMENTS",
    "PARTIAL_MARK",
    "PEEK_KEPT_BYTES",
    "ExternalFile",
    "LoadedModel",
    "OutputBusy",
    "ReadProto",
    "StagedDirectory",
    "check_proto",
    "claim",
    "copy_file",
    "copy_model",
    "copy_model_file",
    "from_proto",
    "load",
    "model_files",
    "onnxruntime_loads",
    "output_lock",
    "peek",
    "read_checked",
    "read_proto",
    "refuse_existing",
    "refuse_inputs",
    "remove_stale",
    "remove_stale_partials",
    "restore_map_types",
    "safe_location",
    "save",
    "scratch_folder",
    "sha256_file",
    "sort_topologically",
    "staging_prefix",
    "strip_map_types",
    "tar_folder",
    "to_loaded",
    "to_proto",
    "validate_declared_dims",
    "validate_external_data",
    "validate_inline_tensors",
    "write_streamed",
    "write_text_atomic",
    "written_files",
]
