"""The records the drivers return and the reports are rendered from: plain data, one layer below
`pipeline/`, `audit/` and `report/`, so a renderer needs no driver and a driver no renderer.

    legalize.py   LegalizeReport (and each pass's record, each node left illegal)
    shapes.py     ShapePlan: what each input is built, verified and timed at
    build.py      BuildReport
    device.py     DeviceResult: the board's result.json, read against its versioned schema
    partition.py  PartitionReport
    audit.py      AuditOptions, a cell (CellSpec, CellResult), the audit's tallies and report
    targets.py    the target listing

Records of the layers below stay with them (CheckReport in analysis/, QuantizeReport in
quantize/, BenchReport in bench/, Verification in verify/); each record here reads back from
the JSON it wrote (`results.from_dict`), which is how `device import` re-renders report.md.
"""
