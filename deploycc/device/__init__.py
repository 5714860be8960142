"""The device loop's board half, in one room: what travels to a board, what runs there, and what
comes back, below backends/ (the TensorRT backend writes its bundle with it) and above verify/.

    bundle.py         the bundle's layout (file names, schema), reading one, the reference data
                      the board judges its engine by, and run_on_device.sh (trtexec's runner)
    run_on_device.py  the board's runner: standard-library Python 3.6 and numpy, copied into every
                      bundle; builds, verifies and times the engine and writes result.json
    ray_task.py       the on-board half of an audit cell under Ray: the runner, on the board's node
    remote.py         `deploycc device run`'s transport: the bundle over ssh, result.json back
    logs.py           what the board's tools print (trtexec's summary, tegrastats), parsed here
    trtexec.py        a bundle run_on_device.sh ran: trtexec's outputs judged here, as result.json
    board_files.py    what comes back, read as input: bounded, checked against the schemas of the
                      programs that write it (result.json, the reference, trtexec's outputs), and
                      never followed out of its folder

The steps around it stay with their layers: the TensorRT backend says what its bundle holds
(backends/tensorrt/bundle.py: the settings and the trtexec command), `device import` merges a
result into the build's records (pipeline/device_import.py, records/device.py), `build
--engine-only` builds a bundle's engine (pipeline/engine_only.py), the audit's Ray executor
schedules the board's task (audit/ray_executor.py), and the commands are cli/device_cmd.py.
"""

# The engines run_on_device.py takes (`--engine`), named in the taxonomy (the audit's records
# default to the board's own) and re-exported here, with the board's half.
from deploycc.taxonomy import BOARD_ENGINE, GPU_ENGINE, RUNNER_ENGINES

__all__ = ["BOARD_ENGINE", "GPU_ENGINE", "RUNNER_ENGINES"]
