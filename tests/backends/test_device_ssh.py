"""`deploycc device run` over a real SSH server started here on localhost (asyncssh's server,
running each command with /bin/sh), the real OpenSSH client, and the bundle's runner executed
there with ONNX Runtime standing in for TensorRT."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import sys
import threading
from pathlib import Path

import pytest

from tests.backends.test_device_runner import built  # noqa: F401  (the module's bundle fixture)
from tests.cli.test_cli import run as run_cli

asyncssh = pytest.importorskip("asyncssh")
if shutil.which("ssh") is None:
    pytest.skip("the OpenSSH client is not installed", allow_module_level=True)


class _Server:
    """An SSH server in a thread: public-key login, commands run by /bin/sh in HOME."""

    def __init__(self, home: Path, client_key) -> None:
        self.home, self.client_key = home, client_key
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "the SSH server did not start"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self.ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        home = str(self.home)

        async def handle(process) -> None:
            data = await process.stdin.read()
            child = await asyncio.create_subprocess_shell(process.command, cwd=home,
                                                          stdin=asyncio.subprocess.PIPE,
                                                          stdout=asyncio.subprocess.PIPE,
                                                          stderr=asyncio.subprocess.PIPE)
            out, err = await child.communicate(data)
            process.stdout.write(out)
            process.stderr.write(err)
            process.exit(child.returncode)

        self.server = await asyncssh.listen(
            "127.0.0.1", 0, server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
            authorized_client_keys=asyncssh.import_authorized_keys(
                self.client_key.export_public_key().decode()),
            process_factory=handle, encoding=None)
        self.port = self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture()
def board(tmp_path: Path):
    key = asyncssh.generate_private_key("ssh-ed25519")
    identity = tmp_path / "id_ed25519"
    identity.write_bytes(key.export_private_key())
    identity.chmod(0o600)
    home = tmp_path / "board"
    home.mkdir()
    server = _Server(home, key)
    yield server, identity, home
    server.close()


def _ssh_args(port: int, identity: Path) -> list[str]:
    return ["--port", str(port), "--identity", str(identity), "--ssh-option", "StrictHostKeyChecking=no",
            "--ssh-option", "UserKnownHostsFile=/dev/null", "--ssh-option", "LogLevel=ERROR"]


def test_device_run_over_ssh_verifies_on_the_board_and_imports(board, built: Path, tmp_path: Path) -> None:  # noqa: F811
    server, identity, home = board
    out = tmp_path / "out"
    shutil.copytree(built, out)
    scratch = tmp_path / "scratch"  # the command's temporary files: the fetched result's copy is gone after
    scratch.mkdir()
    done = run_cli("device", "run", str(out), "--host", "tester@127.0.0.1", *_ssh_args(server.port, identity),
                   "--python", sys.executable, "--engine", "onnxruntime", "--iterations", "5",
                   env={"TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr
    assert not list(scratch.iterdir())
    assert (home / "deploycc-bundles" / "out" / "bundle" / "result.json").is_file()  # it ran on the board
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "verified-on-device" and report["device"]["latency"]["iterations"] == 5


def test_an_unreachable_board_is_one_line_and_exit_2(built: Path, tmp_path: Path) -> None:  # noqa: F811
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "out"
    shutil.copytree(built, out)
    before = (out / "report.json").read_bytes()
    refused = run_cli("device", "run", str(out), "--host", "tester@127.0.0.1", "--port", str(port),
                      "--ssh-option", "StrictHostKeyChecking=no")
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) <= 2 and "Traceback" not in refused.stderr
    assert "cannot reach" in refused.stderr and (out / "report.json").read_bytes() == before
