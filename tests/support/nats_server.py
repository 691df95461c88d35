"""NATS servers for tests (Debian's `nats-server`) on 127.0.0.1 at free ports, JetStream on
in a directory of each server's own: one server (`NatsServer`), or three in a NATS cluster
(`NatsCluster`) whose servers can each be killed and restarted on the same ports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import nats
import nats.errors

from tests.support.ports import free_port

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


class NatsServer:
    """One nats-server. With `cluster_name`, a member of that NATS cluster: it listens for
    routes on its own `route_port` and solicits `routes` (the members' route URLs)."""

    def __init__(
        self,
        *,
        name: str = "",
        cluster_name: str = "",
        routes: tuple[str, ...] = (),
        route_port: int = 0,
        directory: Path | None = None,
    ) -> None:
        if not Path(NATS_SERVER).exists():
            raise RuntimeError(
                "nats-server is not installed: run `make system-deps` (Debian package nats-server)"
            )
        self.directory = directory or Path(tempfile.mkdtemp(prefix="mqtt-test-nats-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_path = self.directory / "nats.log"
        self.port = free_port()
        self.monitor_port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.name = name
        self.cluster_name = cluster_name
        self.routes = routes
        self.route_port = route_port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def urls(self) -> list[str]:
        return [self.url]

    def _args(self) -> list[str]:
        args = [
            NATS_SERVER,
            *("-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.monitor_port)),
            *("-js", "-sd", str(self.directory / "jetstream")),
        ]
        if self.cluster_name:
            args += [
                *("--server_name", self.name, "--cluster_name", self.cluster_name),
                *("--cluster", f"nats://127.0.0.1:{self.route_port}"),
                *("--routes", ",".join(self.routes)),
            ]
        return args

    def start(self) -> None:
        """Start (again, on the same ports and store) and wait for its client port and, in
        a NATS cluster, its route port (nats-server opens that after saying it is ready,
        and exits if it cannot)."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self._args(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not (self._client_port_ready() and self._route_port_ready()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start:\n{self.log()}")
            time.sleep(0.05)

    def _client_port_ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                return probe.recv(4) == b"INFO"
        except OSError:
            return False

    def _route_port_ready(self) -> bool:
        """Whether something listens on the route port, read from /proc/net/tcp (a probe
        connection would be a route attempt in the server's log)."""
        if not self.cluster_name:
            return True
        listening = f"0100007F:{self.route_port:04X} 00000000:0000 0A"
        return listening in Path("/proc/net/tcp").read_text()

    def exited(self) -> bool:
        """Whether it was started and its process has ended on its own."""
        return self.process is not None and self.process.poll() is not None

    def jetstream_ready(self) -> bool:
        """Whether the server says JetStream is healthy (in a cluster: a meta leader, and
        this server current with it)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.monitor_port}/healthz", timeout=1
            ) as answer:
                return bool(json.load(answer).get("status") == "ok")
        except OSError:
            return False

    def client_names(self) -> list[str]:
        """The names of the clients connected to this server now (its /connz)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.monitor_port}/connz?limit=1000", timeout=2
        ) as answer:
            return [c.get("name", "") for c in json.load(answer).get("connections") or []]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: its machine died."""
        self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class NatsCluster:
    """Three nats-servers routed to each other in one NATS cluster, JetStream on each with
    its own store (docs/cluster.md "Running three nodes on three machines")."""

    def __init__(self, size: int = 3) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mqtt-test-natscluster-"))
        route_ports = [free_port() for _ in range(size)]
        routes = tuple(f"nats://127.0.0.1:{port}" for port in route_ports)
        self.servers = [
            NatsServer(
                name=f"n{index}",
                cluster_name="mqtt-test",
                routes=routes,
                route_port=port,
                directory=self.directory / f"n{index}",
            )
            for index, port in enumerate(route_ports)
        ]

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def start(self) -> None:
        for server in self.servers:
            server.start()
        self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every running server says JetStream is healthy (a quorum elected a leader)."""
        deadline = time.monotonic() + timeout
        running = [server for server in self.servers if server.process is not None]
        while not all(server.jetstream_ready() for server in running):
            dead = [server for server in running if server.exited()]
            if dead:
                logs = "\n".join(server.log() for server in dead)
                raise RuntimeError(f"a server of the NATS cluster exited:\n{logs}")
            if time.monotonic() > deadline:
                logs = "\n".join(server.log()[-3000:] for server in running)
                raise RuntimeError(f"the NATS cluster's JetStream did not get ready:\n{logs}")
            time.sleep(0.1)

    def server_of(self, client_name: str) -> NatsServer:
        """The running server a NATS client whose name ends with `client_name` is
        connected to."""
        deadline = time.monotonic() + 5
        while True:
            for server in self.servers:
                if server.process is not None and any(
                    name.endswith(client_name) for name in server.client_names()
                ):
                    return server
            if time.monotonic() > deadline:
                raise AssertionError(f"no NATS server has a client named {client_name!r}")
            time.sleep(0.1)

    def lead(self, stream: str, server: NatsServer) -> None:
        """Make `server` the leader of JetStream stream `stream` (asking the leader to step
        down until the election picks it)."""
        asyncio.run(self._lead(stream, server))

    async def _lead(self, stream: str, server: NatsServer) -> None:
        client = await nats.connect(servers=[server.url])
        try:
            js = client.jetstream()
            deadline = time.monotonic() + 30
            while True:
                info = await js.stream_info(stream)
                leader = info.cluster.leader if info.cluster is not None else None
                if leader == server.name:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{server.name} did not become leader of {stream}")
                if leader is not None:
                    with contextlib.suppress(nats.errors.TimeoutError):
                        await client.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", timeout=2)
                await asyncio.sleep(0.2)
        finally:
            await client.close()

    def remove(self) -> None:
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
