"""The records the drivers return and the reports are rendered from: plain typed data at the
bottom of the house. A record imports the standard library, results.py, taxonomy.py and other
records, nothing above (lint-imports holds it: records sit below errors.py too, so a record that
refuses its data raises ValueError), so any layer may build one and a renderer needs no driver.

    legalize.py       LegalizeReport (and each pass's record, each node left illegal, a blame)
    check.py          CheckReport: each target's verdict (TargetVerdict, NodeGroup), graph-level
                      findings, ONNX Runtime's predicted placement
    rewrite.py        Rewrite, and the Certificate of its proof
    verification.py   Verification: each output compared (OutputComparison), and its caveat
    export.py         ExportReport: a torch model's export attempts and their proofs
    shapes.py         ShapePlan: what each input is built, verified and timed at
    artifact.py       Artifact: what a backend built, and where each node runs (Placement)
    bench.py          LatencyStats, and two runners timed against each other (Comparison)
    half.py           HalfPrecisionReport: what fp16/bf16 breaks, the layers kept in fp32
    quantize.py       QuantizeReport: how --precision int8 quantized, and whether it paid off
    build.py          BuildReport
    device.py         DeviceResult: the board's result.json, read against its versioned schema
    device_schema.py  that schema, as data, and the one checker of it
    partition.py      PartitionReport
    audit.py          AuditOptions, a cell (CellSpec, CellResult), the audit's tallies and report
    targets.py        the target listing

The modules that make a record re-export it where it used to live (Artifact from backends/base.py,
Verification from verify/verification.py, ...). A record's logic that needs a layer above stays
there as a function. Each record reads back from the JSON it wrote (`results.from_dict`), which
is how `device import` re-renders report.md. Records only one layer reads stay with it
(BenchReport in bench/).
"""
