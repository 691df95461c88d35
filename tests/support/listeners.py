"""Helpers for listener tests: throw-away certificates on disk, and a listener's bound port.

Certificates come from trustme: a CA, a server certificate for localhost and 127.0.0.1, and
client certificates with a chosen common name, each written as PEM files the broker and the
clients read. A broker started with `port = 0` listeners logs one "listening:" line per
listener; `listener_port` reads the port back from it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import trustme

from tests.support.broker_process import BrokerProcess

LISTENING = re.compile(r"listening: (\w+) ([\d.]+):(\d+)")


class Certificates:
    """A trustme CA with its files in `directory`: ca.pem, server.pem (key + chain)."""

    def __init__(self, directory: Path, name: str = "") -> None:
        self.directory = directory
        self.ca = trustme.CA()
        self.ca_file = directory / f"ca{name}.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.server_file = directory / f"server{name}.pem"
        self.write_server_certificate(self.server_file)

    def write_server_certificate(self, path: Path) -> None:
        """This CA's certificate for localhost and 127.0.0.1, with its key, into `path`."""
        server = self.ca.issue_cert("localhost", "127.0.0.1")
        server.private_key_and_cert_chain_pem.write_to_path(str(path))

    def client_file(self, common_name: str) -> Path:
        """A client certificate (key + chain) with `common_name`, signed by this CA."""
        path = self.directory / f"client-{common_name}.pem"
        cert = self.ca.issue_cert(f"{common_name}.clients.example", common_name=common_name)
        cert.private_key_and_cert_chain_pem.write_to_path(str(path))
        return path


def listener_port(broker: BrokerProcess, kind: str, nth: int = 0, timeout: float = 5.0) -> int:
    """The port of the `nth` listener of type `kind`, from the broker's "listening:" lines.

    In a pool every worker logs every listener, and the workers' lines interleave. Each worker
    logs its listeners in configuration order, so the ports in order of first appearance are
    the configured order whatever the interleaving.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = (int(m[3]) for m in LISTENING.finditer(broker.log()) if m[1] == kind)
        ports = list(dict.fromkeys(found))
        if len(ports) > nth:
            return ports[nth]
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {kind} listener #{nth} in the broker log:\n{broker.log()}")
        time.sleep(0.02)
