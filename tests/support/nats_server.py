"""A NATS server for a test module (Debian's `nats-server`), on 127.0.0.1 at a free port,
with JetStream on in a directory of its own."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.admin import free_port

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


class NatsServer:
    def __init__(self) -> None:
        if not Path(NATS_SERVER).exists():
            raise RuntimeError(
                "nats-server is not installed: run `make system-deps` (Debian package nats-server)"
            )
        self.directory = Path(tempfile.mkdtemp(prefix="mqtt-test-nats-"))
        self.log_path = self.directory / "nats.log"
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    NATS_SERVER,
                    *("-a", "127.0.0.1", "-p", str(self.port)),
                    *("-js", "-sd", str(self.directory / "jetstream")),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                    if probe.recv(4) == b"INFO":
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start:\n{self.log()}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
