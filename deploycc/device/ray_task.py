"""The on-board half of a TensorRT audit cell under `--executor ray`: the bundle's own runner, run
on the node that joined with the target's resource (audit/ray_executor.py schedules it).

This module is shipped to that node by value (the Ray executor registers it with cloudpickle), so
it imports nothing but the standard library: the board needs Ray, its Python with numpy and the
TensorRT bindings, and not deploycc (whose Python floor the boards of JetPack 4 and 5 are below).
The runner is the same run_on_device.py that `deploycc device run` uses over SSH.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import tarfile
import tempfile


def unpack(archive: bytes, into: str, strip: str | None = None) -> None:
    """A tar into `into`, less its top folder `strip` when given; any member that would land
    outside `into`, or is not a plain file or folder (a bundle holds nothing else), is refused."""
    root = os.path.realpath(into)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
        members = []
        for member in tar.getmembers():
            if strip is not None:
                if member.name == strip:
                    continue
                if not member.name.startswith(strip + "/"):
                    raise ValueError(f"a member outside {strip}/: {member.name}")
                member.name = member.name[len(strip) + 1:]
            where = os.path.realpath(os.path.join(root, member.name))
            if not (member.isfile() or member.isdir()) or os.path.commonpath([root, where]) != root:
                raise ValueError(f"unsafe member: {member.name}")
            members.append(member)
        tar.extractall(root, members=members)


def run_bundle(archive: bytes, *, engine: str, iterations: int, timeout: float,
               python: str | None = None) -> dict:
    """Unpack the bundle (a tar of its `bundle/` folder), run its runner with this node's Python
    (or `python`), and return {"host", "result": result.json's text} or {"host", "error"}."""
    host = socket.gethostname()
    with tempfile.TemporaryDirectory(prefix="deploycc-bundle-") as folder:
        try:
            unpack(archive, folder)
        except (tarfile.TarError, ValueError, OSError) as error:
            return {"host": host, "error": f"cannot unpack the bundle: {error}"}
        runner = os.path.join(folder, "bundle", "run_on_device.py")
        out = os.path.join(folder, "result.json")
        command = [python or sys.executable, runner, "--engine", engine, "--iterations", str(iterations),
                   "--out", out]
        try:
            ran = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"host": host, "error": f"the runner did not finish in {timeout:g} s"}
        except OSError as error:
            return {"host": host, "error": f"cannot start the runner with {command[0]}: {error}"}
        if not os.path.isfile(out):
            tail = [line for line in (ran.stderr or ran.stdout or "").splitlines() if line.strip()]
            return {"host": host, "error": f"the runner left no result (exit {ran.returncode}): "
                                           f"{tail[-1].strip() if tail else 'no message'}"}
        with open(out) as handle:
            return {"host": host, "result": handle.read()}
