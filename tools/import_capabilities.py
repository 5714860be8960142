"""Turn the vendor capability data in ../shared/capabilities into deploycc's shipped op tables.

Run by hand when the vendor data changes (never at run time):

    python tools/import_capabilities.py [--shared ../shared/capabilities] [--out targets/tables]

Each output file is one source at one version, in TOML, with the source's provenance
(repo, path, commit, url) copied over. What the source says is kept as it says it:
`restrictions` hold the vendor's own text; `predicates` name the checks from deploycc's
fixed predicate registry that enforce the restrictions we can judge from a graph.
The restriction-to-predicate mapping below is the one curated piece of this file.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

TRT_TYPE_TOKENS = {
    "FP32": "float32", "FLOAT32": "float32", "FP16": "float16", "FLOAT16": "float16",
    "BF16": "bfloat16", "BFLOAT16": "bfloat16", "FP8": "float8e4m3fn", "FP4": "float4e2m1",
    "INT4": "int4", "INT8": "int8", "INT32": "int32", "INT64": "int64", "UINT8": "uint8",
    "BOOL": "bool", "DOUBLE": "float64",
}

ONNX_TYPE_NAMES = {"float": "float32", "double": "float64"}

# Vendor restriction text -> deploycc predicates (names from deploycc/legality/predicates.py).
# Only restrictions that can be judged from the graph are mapped; the rest stay as notes.
TRT_RESTRICTION_PREDICATES: dict[str, list[dict[str, Any]]] = {
    "`axes` must be an initializer": [{"name": "input_is_constant", "input": "axes"}],
    "`axes` must be a constant tensor": [{"name": "input_is_constant", "input": "axes"}],
    "`axis` must be an initializer": [{"name": "input_is_constant", "input": "axis"}],
    "`K` input must be an initializer": [{"name": "input_is_constant", "input": "K"}],
    "`x_zero_point` must be zero": [{"name": "input_is_zero", "input": "x_zero_point"}],
    "`y_zero_point` must be 0": [{"name": "input_is_zero", "input": "y_zero_point"}],
    "2D or 3D Pooling only": [{"name": "spatial_rank_in", "ranks": [2, 3]}],
    "2D or 3D pooling only. `Indices` output tensor unsupported": [
        {"name": "spatial_rank_in", "ranks": [2, 3]},
        {"name": "output_unused", "output": 1},
    ],
    "Dynamic input shapes are unsupported": [{"name": "static_input_shapes"}],
    "Ellipsis and diagonal operations are not supported. Broadcasting between inputs is not "
    "supported": [{"name": "einsum_no_ellipsis_or_diagonal"}],
    "Scales `scale` and biases `B` must be initializers. Input rank must be >=3 & <=5": [
        {"name": "input_is_constant", "input": "scale"},
        {"name": "input_is_constant", "input": "B"},
        {"name": "input_rank_in", "input": 0, "ranks": [3, 4, 5]},
    ],
}

RESIZE_ATTRIBUTE_SETS = {
    "Supported resize transformation modes": "coordinate_transformation_mode",
    "Supported resize modes": "mode",
    "Supported nearest modes": "nearest_mode",
}
RESIZE_DEFAULTS = {
    "coordinate_transformation_mode": "half_pixel",
    "mode": "nearest",
    "nearest_mode": "round_prefer_floor",
}


def trt_predicates(op_type: str, restrictions: list[str] | None) -> list[dict[str, Any]]:
    predicates: list[dict[str, Any]] = []
    for text in restrictions or []:
        clean = text.strip()
        if clean in TRT_RESTRICTION_PREDICATES:
            predicates.extend(TRT_RESTRICTION_PREDICATES[clean])
            continue
        for prefix, attribute in RESIZE_ATTRIBUTE_SETS.items():
            if op_type == "Resize" and clean.startswith(prefix):
                values = re.findall(r"`([a-z_]+)`", clean)
                predicates.append(
                    {
                        "name": "attribute_in",
                        "attribute": attribute,
                        "values": values,
                        "default": RESIZE_DEFAULTS[attribute],
                    }
                )
    return predicates


def provenance(doc: dict[str, Any]) -> dict[str, Any]:
    source = doc.get("source", {})
    keep = ("repo", "path", "commit", "tag_or_branch", "url", "retrieved", "provenance_note")
    return {key: source[key] for key in keep if source.get(key)}


def onnx_type_name(token: str) -> str:
    """'tensor(float)' -> 'float32'; 'seq(tensor(int64))' -> 'seq(int64)'."""
    match = re.fullmatch(r"(seq|optional)\((.*)\)", token)
    if match:
        return f"{match.group(1)}({onnx_type_name(match.group(2))})"
    match = re.fullmatch(r"tensor\((.*)\)", token)
    name = match.group(1) if match else token
    return ONNX_TYPE_NAMES.get(name, name)


def domain_name(domain: str) -> str:
    return "" if domain in ("ai.onnx", "") else domain


def import_tensorrt(doc: dict[str, Any], name: str) -> dict[str, Any]:
    ops = []
    for row in doc["ops"]:
        entry: dict[str, Any] = {
            "op": row["op_type"],
            "status": "supported" if row["supported"] else "unsupported",
        }
        if row.get("types"):
            entry["dtypes"] = [TRT_TYPE_TOKENS[t] for t in row["types"]]
        if row.get("restrictions"):
            entry["restrictions"] = row["restrictions"]
        predicates = trt_predicates(row["op_type"], row.get("restrictions"))
        if predicates:
            entry["predicates"] = predicates
        if row.get("support_qualifier"):
            entry["note"] = row["support_qualifier"]
        ops.append(entry)
    return {
        "name": name,
        "product": doc["product"],
        "product_version": doc["product_version"],
        "dtype_mode": "primary",
        "opset": {k: v for k, v in doc["opset_range"].items() if v is not None},
        "declared_dtypes": [TRT_TYPE_TOKENS[t] for t in doc["doc_declared_onnx_data_types"]],
        "type_notes": doc.get("doc_type_notes", []),
        "source": provenance(doc),
        "op": ops,
    }


def import_ort(doc: dict[str, Any], name: str) -> dict[str, Any]:
    ops = []
    for row in doc["ops"]:
        for kernel in row["kernels"]:
            entry: dict[str, Any] = {
                "op": row["op_type"],
                "status": "supported",
                "since": kernel["since_opset"],
            }
            if row["domain"] != "ai.onnx":
                entry["domain"] = domain_name(row["domain"])
            if kernel["until_opset"] is not None:
                entry["until"] = kernel["until_opset"]
            if kernel["type_constraints"]:
                entry["type_constraints"] = {
                    key: sorted({onnx_type_name(t) for t in values})
                    for key, values in kernel["type_constraints"].items()
                }
            ops.append(entry)
    return {
        "name": name,
        "product": doc["product"],
        "product_version": doc["product_version"],
        "dtype_mode": "constraints",
        "function_expansion": True,
        # ORT matches a kernel registered "since S, open-ended" only to op version S: a newer
        # ONNX version of the op (RoiAlign-22 vs a kernel since 16) finds no kernel.
        "open_range": "next_schema_version",
        "opset": {"statement": doc["opset_range"]["statement"]},
        "source": provenance(doc),
        "op": ops,
    }


def parse_operator_kernels(markdown: str) -> list[dict[str, Any]]:
    """The rows of one execution provider's section of ONNX Runtime's docs/OperatorKernels.md, as
    the ORT capability files hold them: per op and domain, its kernels (since, until, type
    constraints). A row names the op, or continues the op above ("|||[6, 12]|..."); the opset
    cell is "13+" (open), "13" (one version) or "[6, 12]"; the types cell is
    "**T** = tensor(float), tensor(float16)<br/> **T1** = ..."."""
    ops: list[dict[str, Any]] = []
    domain = "ai.onnx"
    for line in markdown.splitlines():
        if not line.startswith("|") or line.startswith("|--") or line.startswith("| Op Name"):
            continue
        cells = line.strip()[1:-1].split("|")  # the row's own outer pipes only: "|||13|" continues
        found = re.match(r"\*\*Operator Domain:\*\* \*(.+)\*", cells[0])
        if found:
            domain = found.group(1)
            continue
        if len(cells) < 4:
            continue
        op, opset, types = cells[0].strip(), cells[2].strip(), cells[3]
        if op:
            ops.append({"op_type": op, "domain": domain, "kernels": []})
        elif not ops:
            continue
        ops[-1]["kernels"].append({**_opset_range(opset), "type_constraints": _type_constraints(types)})
    return ops


def _opset_range(text: str) -> dict[str, int | None]:
    if text.endswith("+"):
        return {"since_opset": int(text[:-1]), "until_opset": None}
    bounds = re.fullmatch(r"\[(\d+),\s*(\d+)\]", text)
    if bounds:
        return {"since_opset": int(bounds.group(1)), "until_opset": int(bounds.group(2))}
    return {"since_opset": int(text), "until_opset": int(text)}


def _type_constraints(text: str) -> dict[str, list[str]]:
    constraints = {}
    for part in text.split("<br/>"):
        found = re.match(r"\s*\*\*(\w+)\*\* = (.*)", part)
        if found:
            constraints[found.group(1)] = [t.strip() for t in found.group(2).split(", ") if t.strip()]
    return constraints


HERE_VENDOR = Path(__file__).resolve().parent / "vendor"
CUDA_KERNELS = "ort-operator-kernels-cuda-001d12d.md"
CUDA_TABLE = "ort-cuda-1.25"


def ort_kernels_doc(path: Path) -> dict[str, Any]:
    """The CUDA EP section of OperatorKernels.md (tools/vendor/, with its provenance in its first
    line) as an ORT capability document, for import_ort."""
    return {
        "product": "ONNX Runtime CUDAExecutionProvider",
        "product_version": "1.25 (main @001d12d, after 1.24.1 and before 1.25.0)",
        "opset_range": {"statement": "per-op kernel version ranges of the CUDA EP; until_opset null = "
                                     "open-ended (latest)"},
        "source": {"repo": "microsoft/onnxruntime", "path": "docs/OperatorKernels.md",
                   "commit": "001d12d2623fd411ce0f83d05abb5e82304a3389", "tag_or_branch": "main",
                   "url": "https://github.com/microsoft/onnxruntime/blob/001d12d2623fd411ce0f83d05abb5e82304a3389"
                          "/docs/OperatorKernels.md",
                   "retrieved": "2026-12-02",
                   "provenance_note": "the stored copy is at this main commit: it has the "
                                      "GroupQueryAttention "
                                      "fp8 KV cache (after 1.24.1) and not the opset-26 CumProd/BitCast "
                                      "kernels of 1.25.0, so kernels 1.25.0 added later are missing "
                                      "(deploycc then predicts CPU where CUDA runs)"},
        "ops": parse_operator_kernels(path.read_text()),
    }


def import_openvino(doc: dict[str, Any], name: str, probe_key: str) -> dict[str, Any]:
    ops = []
    for row in doc["ops"]:
        probe = row.get(probe_key)
        table_says = bool(row.get("supported"))
        entry: dict[str, Any] = {"op": row["op_type"]}
        if row["domain"] != "ai.onnx":
            entry["domain"] = domain_name(row["domain"])
        # The installed release's own frontend is the ground truth for that release;
        # the (unpinned) master table supplies the opset versions.
        if probe is True:
            entry["status"] = "supported"
        elif probe is False:
            entry["status"] = "unsupported"
        elif probe == "crashed":
            entry["status"] = "uncertain"
            entry["note"] = "the frontend crashed on a single-node probe of this op"
        else:
            entry["status"] = "supported" if table_says else "unsupported"
        if probe in (True, False) and probe != table_says:
            entry["note"] = (
                f"frontend table at {doc['source'].get('commit', '')[:8]} says "
                f"{'supported' if table_says else 'unsupported'}; the released frontend says "
                f"{'supported' if probe else 'unsupported'}"
            )
        versions = row.get("supported_versions") or []
        if versions:
            entry["since"] = min(versions)
        if row.get("restrictions"):
            entry["restrictions"] = row["restrictions"]
        ops.append(entry)
    build = (doc.get("secondary_sources") or [{}])[0].get("openvino_build", "")
    return {
        "name": name,
        "product": doc["product"],
        "product_version": build or doc["product_version"],
        "dtype_mode": "none",
        "function_expansion": True,
        "opset": {},
        "source": provenance(doc),
        "op": ops,
    }


def import_dla_orin(doc: dict[str, Any], name: str) -> dict[str, Any]:
    ops = []
    for row in doc["ops"]:
        status = {True: "supported", False: "unsupported", None: "uncertain"}[row["supported"]]
        entry: dict[str, Any] = {"op": row["op_type"], "status": status}
        notes = [row.get("tensorrt_support") or ""]
        if row.get("min_tensorrt_version"):
            notes.append(f"min TensorRT {row['min_tensorrt_version']}")
        entry["note"] = "; ".join(n for n in notes if n)
        if row.get("restrictions"):
            entry["restrictions"] = row["restrictions"]
        ops.append(entry)
    return {
        "name": name,
        "product": doc["product"],
        "product_version": doc["product_version"],
        "dtype_mode": "none",
        "opset": {k: v for k, v in doc["opset_range"].items() if v is not None},
        "source": provenance(doc),
        "op": ops,
    }


def import_dla_xavier(doc: dict[str, Any], name: str) -> dict[str, Any]:
    by_op: dict[str, dict[str, Any]] = {}
    for layer in doc["ops"]:
        status = {True: "supported", False: "unsupported", None: "uncertain"}[layer["supported"]]
        for mapped in layer.get("onnx_ops_mapped") or []:
            for op in re.findall(r"^([A-Z][A-Za-z]+)(?:/([A-Z][A-Za-z]+))?", mapped)[0]:
                if not op:
                    continue
                entry = by_op.setdefault(op, {"op": op, "status": status, "restrictions": []})
                # An op reaching several layers is only as supported as its weakest layer.
                order = ["unsupported", "uncertain", "supported"]
                if order.index(status) < order.index(entry["status"]):
                    entry["status"] = status
                entry["restrictions"].extend(
                    f"{layer['op_type']}: {r}" for r in layer.get("restrictions") or []
                )
    return {
        "name": name,
        "product": doc["product"],
        "product_version": doc["product_version"],
        "dtype_mode": "none",
        "opset": {},
        "general_restrictions": doc.get("general_restrictions", []),
        "source": provenance(doc),
        "op": sorted(by_op.values(), key=lambda e: e["op"]),
    }


def import_jetpack(doc: dict[str, Any]) -> dict[str, Any]:
    sources = doc["sources"]
    releases = []
    for row in doc["jetpack"]:
        official = all(sources.get(c, {}).get("official", False) for c in row["citations"])
        entry = {
            key: row[key]
            for key in ("jetpack", "jetson_linux_l4t", "tensorrt", "cuda", "cudnn", "dla_sw",
                        "max_onnx_opset", "notes")
            if row.get(key) is not None
        }
        entry["all_citations_official"] = official
        entry["citations"] = [
            {"key": c, "url": sources.get(c, {}).get("url", ""),
             "official": bool(sources.get(c, {}).get("official", False))}
            for c in row["citations"]
        ]
        releases.append(entry)
    opsets = [
        {key: row[key] for key in ("tensorrt", "opset_min", "opset_max", "onnx_tensorrt_commit",
                                   "url") if row.get(key) is not None}
        for row in doc["tensorrt_onnx_opset"]
    ]
    return {
        "name": "jetpack",
        "retrieved": doc["retrieved"],
        "release": releases,
        "tensorrt_opset": opsets,
        "dla_note": [n["fact"] for n in doc.get("tensorrt_dla_notes", [])],
    }


# ---------------------------------------------------------------- a small TOML writer

def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def to_toml(document: dict[str, Any], header: str) -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines.append("")
    tables: list[tuple[str, dict[str, Any]]] = []
    arrays: list[tuple[str, list[dict[str, Any]]]] = []
    for key, value in document.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            arrays.append((key, value))
        else:
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
    for key, table in tables:
        lines += ["", f"[{toml_key(key)}]"]
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()]
    for key, rows in arrays:
        for row in rows:
            lines += ["", f"[[{toml_key(key)}]]"]
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"


HEADER = """Generated by tools/import_capabilities.py from ../shared/capabilities/{file}.
Do not edit by hand: fix the importer (or the vendor data) and regenerate.
{product} {version}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--shared", type=Path, default=here.parent / "shared" / "capabilities")
    parser.add_argument("--out", type=Path, default=here / "targets" / "tables")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    def load(file: str) -> dict[str, Any]:
        return json.loads((args.shared / file).read_text())

    jobs = [
        ("onnx-tensorrt-8.2.json", "onnx-tensorrt-8.2", import_tensorrt),
        ("onnx-tensorrt-8.5.json", "onnx-tensorrt-8.5", import_tensorrt),
        ("onnx-tensorrt-8.6.json", "onnx-tensorrt-8.6", import_tensorrt),
        ("onnx-tensorrt-10.x.json", "onnx-tensorrt-10", import_tensorrt),
        ("ort-cpu-1.32.0.json", "ort-cpu-1.32", import_ort),
        ("tensorrt-dla-orin.json", "dla-orin", import_dla_orin),
        ("tensorrt-dla-xavier.json", "dla-xavier", import_dla_xavier),
    ]
    for file, name, importer in jobs:
        doc = load(file)
        table = importer(doc, name)
        header = HEADER.format(file=file, product=doc["product"], version=doc["product_version"])
        (args.out / f"{name}.toml").write_text(to_toml(table, header))
        print(f"{name}: {len(table['op'])} entries")
    ov = load("openvino-onnx-fe-master-0ae60f0f.json")
    table = import_openvino(ov, "openvino-2026.4", "frontend_probe_2026_4_1")
    header = HEADER.format(file="openvino-onnx-fe-master-0ae60f0f.json", product=ov["product"],
                           version="2026.4.1 (status from the 2026.4.1 frontend probe)")
    (args.out / "openvino-2026.4.toml").write_text(to_toml(table, header))
    print(f"openvino-2026.4: {len(table['op'])} entries")
    cuda = ort_kernels_doc(HERE_VENDOR / CUDA_KERNELS)
    table = import_ort(cuda, CUDA_TABLE)
    header = HEADER.format(file=CUDA_KERNELS, product=cuda["product"], version=cuda["product_version"])
    (args.out / f"{CUDA_TABLE}.toml").write_text(to_toml(table, header.replace("../shared/capabilities/",
                                                                                "tools/vendor/")))
    print(f"{CUDA_TABLE}: {len(table['op'])} entries")
    jetpack = import_jetpack(load("jetpack.json"))
    header = HEADER.format(file="jetpack.json", product="JetPack", version="release map")
    (args.out / "jetpack.toml").write_text(to_toml(jetpack, header))
    print(f"jetpack: {len(jetpack['release'])} releases")


if __name__ == "__main__":
    main()
