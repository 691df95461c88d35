"""An HAProxy load balancer for tests (Debian's `haproxy`) in front of brokers: TCP mode,
round robin, health checks every 200 ms so a dead broker is skipped within about half a
second; its configuration file is private to the test's directory."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.ports import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
CHECK_INTERVAL = 0.2  # seconds between two health checks of a server


class HaProxy:
    """HAProxy on a free 127.0.0.1 port, spreading TCP connections over `servers`
    (name -> port on 127.0.0.1)."""

    def __init__(self, directory: Path, servers: dict[str, int]) -> None:
        if not Path(HAPROXY).exists():
            raise RuntimeError("haproxy is not installed: run `make system-deps` (Debian haproxy)")
        self.host = "127.0.0.1"
        self.port = free_port()
        self.config_path = directory / "haproxy.cfg"
        self.log_path = directory / "haproxy.log"
        interval = f"{int(CHECK_INTERVAL * 1000)}ms"
        lines = [
            "global",
            "  maxconn 1000",
            "defaults",
            "  mode tcp",
            "  timeout connect 1s",
            "  timeout client 120s",
            "  timeout server 120s",
            "frontend mqtt",
            f"  bind {self.host}:{self.port}",
            "  default_backend nodes",
            "backend nodes",
            "  balance roundrobin",
            # A connection on a server that died is closed at once, so its client reconnects.
            "  option redispatch",
            f"  default-server check inter {interval} fall 1 rise 2"
            " on-marked-down shutdown-sessions",
            *(f"  server {name} 127.0.0.1:{port}" for name, port in servers.items()),
        ]
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start in the foreground (`-db`) and wait until it accepts connections."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
