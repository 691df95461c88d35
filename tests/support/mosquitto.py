"""A reference Mosquitto broker (Debian's `mosquitto`) on loopback, started by a test.

`start_mosquitto` writes a private configuration file (a listener on 127.0.0.1 at `port`, a
free one by default, anonymous clients allowed, persistence in the test's directory so a
stopped and restarted Mosquitto keeps its sessions) and waits until the port accepts. It
returns a `BrokerProcess`, so the test clients that take one of this broker take it too.
"""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.support.broker_process import BrokerProcess
from tests.support.ports import free_port

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def start_mosquitto(tmp_dir: Path, port: int | None = None, extra: str = "") -> BrokerProcess:
    """Mosquitto on 127.0.0.1:`port` with `extra` configuration lines (a TLS listener...)."""
    port = port or free_port()
    data = tmp_dir / f"mosquitto-{port}"
    data.mkdir(exist_ok=True)
    config = data / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        # Mosquitto started as root drops to the user "mosquitto", which may not write the
        # test's directory: it stays the user running the tests.
        f"user {getpass.getuser()}\n"
        "persistence true\n"
        f"persistence_location {data}/\n"
        "log_type all\n"
        "max_queued_messages 100000\n"
        f"{extra}\n",
        encoding="utf-8",
    )
    log_path = data / f"mosquitto-{time.monotonic_ns()}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [MOSQUITTO, "-c", str(config)], stdout=log_file, stderr=subprocess.STDOUT
        )
    broker = BrokerProcess(process, "127.0.0.1", port, log_path)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mosquitto exited with {process.returncode}:\n{broker.log()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            time.sleep(0.05)
            continue
        return broker
    process.kill()
    raise RuntimeError(f"mosquitto did not listen on {port} in 10 s:\n{broker.log()}")
