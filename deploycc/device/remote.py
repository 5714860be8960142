"""`deploycc device run OUTDIR --host user@board`: the bundle to the board, its runner there, the
result back and imported.

The transport is the system's OpenSSH client (`ssh`): the user's ~/.ssh/config, keys, agents
and ProxyJump apply as they do for any ssh command, and nothing else is installed on either
side. The bundle travels as a tar stream on ssh's stdin and the result comes back on its stdout,
so the board needs no SFTP subsystem, only sh, tar and its own Python (3.6 or newer) with numpy
and TensorRT.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from deploycc.device.bundle import BUNDLE_DIR, RUNNER
from deploycc.errors import DeployccError, OptionError
from deploycc.io import tar_folder

REMOTE_ROOT = "deploycc-bundles"
CONNECT_TIMEOUT_S = 15


class RemoteError(DeployccError):
    """The board was reached but the run there left no result (interrupted, out of memory)."""

    exit_code = 1


@dataclass
class Remote:
    host: str  # user@board, or a Host alias of ~/.ssh/config
    port: int | None = None
    identity: Path | None = None
    options: list[str] = field(default_factory=list)  # extra `-o Key=Value`

    def ssh(self, command: str, timeout: float, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        args = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
        if self.port is not None:
            args += ["-p", str(self.port)]
        if self.identity is not None:
            args += ["-i", str(self.identity)]
        for option in self.options:
            args += ["-o", option]
        try:
            return subprocess.run([*args, self.host, command], input=stdin, capture_output=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"ssh to {self.host} did not finish in {timeout:g} s") from None
        except FileNotFoundError:
            raise OptionError("no `ssh` on this machine", hint="install the OpenSSH client") from None


def _last_line(process: subprocess.CompletedProcess) -> str:
    text = (process.stderr or process.stdout or b"").decode(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit {process.returncode}"


def run_on_board(outdir: Path, remote: Remote, *, python: str = "python3", engine: str | None = None,
                 iterations: int = 200, timeout: float = 3600) -> Path:
    """Copy OUTDIR/bundle to the board (a tar stream over ssh: the board needs only sh and tar),
    run its runner there, fetch result.json; the local path of the fetched result (import it
    with pipeline.device_import.import_result)."""
    bundle = outdir / BUNDLE_DIR
    if not (bundle / RUNNER).is_file():
        raise OptionError(f"{outdir}: no bundle with {RUNNER}",
                          hint="give the -o folder of `deploycc build` for a TensorRT target")
    folder = shlex.quote(f"{REMOTE_ROOT}/{outdir.resolve().name}")
    copied = remote.ssh(f"rm -rf {folder}/{BUNDLE_DIR} && mkdir -p {folder} && tar -xf - -C {folder}",
                        timeout=timeout, stdin=tar_folder(bundle))
    if copied.returncode == 255:  # ssh's own failure: the host was not reached
        raise OptionError(f"cannot reach {remote.host}: {_last_line(copied)}",
                          hint="check that `ssh HOST true` works without a password prompt (keys or agent)")
    if copied.returncode != 0:
        raise OptionError(f"cannot copy the bundle to {remote.host}: {_last_line(copied)}")
    chosen = f"--engine {shlex.quote(engine)} " if engine else ""  # None: the bundle's own
    ran = remote.ssh(f"{shlex.quote(python)} {folder}/{BUNDLE_DIR}/{RUNNER} {chosen}"
                     f"--iterations {int(iterations)}", timeout=timeout)
    fetched = remote.ssh(f"cat {folder}/{BUNDLE_DIR}/result.json", timeout=CONNECT_TIMEOUT_S * 4)
    if fetched.returncode != 0 or not fetched.stdout:
        raise RemoteError(f"the runner on {remote.host} left no result (exit {ran.returncode}): "
                          f"{_last_line(ran)}")
    local = Path(tempfile.mkdtemp(prefix="deploycc-device-")) / "result.json"
    local.write_bytes(fetched.stdout)
    return local
