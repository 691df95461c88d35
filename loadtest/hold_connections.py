"""`python -m loadtest.hold_connections`: open and hold many idle MQTT connections.

One process can hold only as many connections as its RLIMIT_NOFILE allows, and one source
address reaches one broker port through at most the local port range (about 28,000 ports by
default). So the connections are spread over `--processes` child processes, child `i` binding
its sockets to the loopback source address 127.0.0.(2 + i): 100,000 connections fit on a
machine whose hard descriptor limit is 20,000 per process.

Each child opens its share in chunks (a chunk's CONNECTs are all sent before its CONNACKs are
read, as a device fleet reconnecting would), reports, then on the parent's word checks that a
sample of its connections still answers PINGREQ, and finally closes them all. Parent and
children speak JSON lines over the children's stdin and stdout. `HeldConnections` is the
parent's side, for tests (tests/integration/test_many_connections.py).

From the command line it prints one JSON line: how many connected, how long it took, the
rate, how many of one connection in 100 answered PINGREQ after 3 s, and, with `--broker-pid`,
the resident memory of the broker's whole process tree (the supervisor, its workers and the
store process) before and with the connections open, and each process's socket count (how a
pool spread them). Every wait is bounded; traffic goes to 127.0.0.0/8 only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from mqtt import ConnAck, Connect, PacketDecoder, PingReq, PingResp, encode

CHUNK = 500
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux 4.2+
PROTOCOL_VERSION = 4


@dataclass(frozen=True)
class ChildPlan:
    """One child's share: how many connections, from which source address, named how."""

    connections: int
    source: str
    prefix: str


def split(connections: int, processes: int) -> list[int]:
    """`connections` spread over `processes` as evenly as whole numbers allow."""
    base, extra = divmod(connections, processes)
    return [base + (1 if index < extra else 0) for index in range(processes)]


def source_address(index: int) -> str:
    """The loopback source address of child `index` (127.0.0.2, 127.0.0.3, ...)."""
    if not 0 <= index < 250:
        raise ValueError(f"child index {index} has no loopback source address (0-249)")
    return f"127.0.0.{2 + index}"


def _read_packet(sock: socket.socket, decoder: PacketDecoder) -> object:
    while True:
        data = sock.recv(64)
        if not data:
            raise ConnectionError("the broker closed the connection")
        packets = decoder.feed(data)
        if packets:
            return packets[0]


def _open_chunk(source: str, host: str, port: int, client_ids: list[str]) -> list[socket.socket]:
    chunk: list[socket.socket] = []
    try:
        for client_id in client_ids:
            sock = _connect_from(source, host, port)
            chunk.append(sock)
            sock.sendall(encode(Connect(client_id, keepalive=600), PROTOCOL_VERSION))
        for sock in chunk:
            connack = _read_packet(sock, PacketDecoder(max_packet_size=64, protocol_version=4))
            if connack != ConnAck(False, 0):
                raise ConnectionError(f"refused: {connack!r}")
    except BaseException:
        for sock in chunk:
            _reset(sock)
        raise
    return chunk


def _connect_from(source: str, host: str, port: int) -> socket.socket:
    """A socket connected from the loopback address `source`.

    IP_BIND_ADDRESS_NO_PORT leaves the local port to connect(), which picks one free for this
    destination. A bind to port 0 would instead search the whole range for a port free for
    every destination (it grew with each connection held: 100,000 opened at 900/s, kernel-
    bound), and would take that port from the kernel's choice for every other client on the
    machine, 127.0.0.1's included, until it left TIME_WAIT."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.settimeout(30)
        sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0): no TIME_WAIT left behind holding the local port for a
    minute, which tens of thousands of closes would otherwise do to later runs."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _ping_sample(sockets: list[socket.socket], every: int) -> tuple[int, int]:
    """(sampled, answered): PINGREQ on one connection in `every`, each wait bounded."""
    sampled = answered = 0
    for sock in sockets[::every]:
        sampled += 1
        try:
            sock.sendall(encode(PingReq(), PROTOCOL_VERSION))
            reply = _read_packet(sock, PacketDecoder(max_packet_size=64, protocol_version=4))
        except OSError:
            continue
        answered += reply == PingResp()
    return sampled, answered


def _raise_soft_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_child(host: str, port: int, plan: ChildPlan, commands: IO[str], out: IO[str]) -> None:
    """A child's life: open, report, ping the sample when told, close when told."""
    _raise_soft_limit()
    sockets: list[socket.socket] = []
    started = time.monotonic()
    error = None
    try:
        while len(sockets) < plan.connections:
            first = len(sockets)
            client_ids = [
                f"{plan.prefix}-{n}" for n in range(first, min(first + CHUNK, plan.connections))
            ]
            sockets.extend(_open_chunk(plan.source, host, port, client_ids))
    except OSError as failure:
        error = f"{type(failure).__name__}: {failure}"
    _say(out, {"connected": len(sockets), "seconds": time.monotonic() - started, "error": error})
    for command in commands:
        word, _, every = command.partition(" ")
        if word != "ping":
            break
        sampled, answered = _ping_sample(sockets, int(every))
        _say(out, {"sampled": sampled, "answered": answered})
    for sock in sockets:
        _reset(sock)


def _say(out: IO[str], record: dict[str, object]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def broker_tree_rss_kib(pid: int) -> int:
    """VmRSS of `pid` and all its descendants, in KiB."""
    return sum(_rss_kib(member) for member in _tree(pid))


def _tree(pid: int) -> Iterator[int]:
    yield pid
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as children:
            kids = [int(kid) for kid in children.read().split()]
    except OSError:
        return
    for kid in kids:
        yield from _tree(kid)


def sockets_per_process(pid: int) -> dict[int, int]:
    """How many sockets each process of `pid`'s tree holds (a pool's spread over workers)."""
    counts = {}
    for member in _tree(pid):
        try:
            names = os.listdir(f"/proc/{member}/fd")
        except OSError:
            continue
        counts[member] = sum(_is_socket(member, name) for name in names)
    return counts


def _is_socket(pid: int, fd: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    except OSError:
        return False


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _read_json(stream: IO[str] | None) -> dict[str, object]:
    """A child's next report (bounded by the children's own 30 s socket time-outs and the
    watchdog)."""
    line = stream.readline() if stream else ""
    if not line:
        raise RuntimeError("a connection-holding child ended without reporting")
    record = json.loads(line)
    if not isinstance(record, dict):
        raise RuntimeError(f"a child reported {line!r}")
    return record


@dataclass
class Opened:
    """What the children reported once they had opened their shares."""

    connected: int
    seconds: float
    errors: list[str]


class HeldConnections:
    """`connections` idle connections held by `processes` children while the block runs.

    `with HeldConnections(...) as held:` returns once every child has opened its share (or
    failed, saying why in `held.opened.errors`); `held.ping_sample()` checks a sample; leaving
    the block closes them all. A watchdog kills the children after `limit_s`, so a stuck
    child fails the run instead of hanging it."""

    def __init__(
        self, host: str, port: int, connections: int, processes: int, limit_s: float
    ) -> None:
        self.host, self.port = host, port
        self.connections, self.processes = connections, processes
        self.limit_s = limit_s
        self.children: list[subprocess.Popen[str]] = []
        self.opened = Opened(0, 0.0, [])

    def __enter__(self) -> HeldConnections:
        prefix = f"hold-{os.getpid()}-{time.monotonic_ns()}"
        self._watchdog = threading.Timer(self.limit_s, self._kill)
        self._watchdog.start()
        started = time.monotonic()
        try:
            for index, share in enumerate(split(self.connections, self.processes)):
                argv = [sys.executable, "-m", "loadtest.hold_connections", "--child"]
                argv += ["--host", self.host, "--port", str(self.port)]
                argv += ["--connections", str(share), "--source", source_address(index)]
                argv += ["--prefix", f"{prefix}-{index}"]
                self.children.append(
                    subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                )
            reports = [_read_json(child.stdout) for child in self.children]
        except BaseException:
            self._close()
            raise
        self.opened = Opened(
            connected=sum(int(str(report["connected"])) for report in reports),
            seconds=time.monotonic() - started,
            errors=[str(report["error"]) for report in reports if report["error"]],
        )
        return self

    def ping_sample(self, every: int = 100) -> tuple[int, int]:
        """(sampled, answered): one connection in `every` sends PINGREQ and awaits PINGRESP."""
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(f"ping {every}\n")
            child.stdin.flush()
        answers = [_read_json(child.stdout) for child in self.children]
        sampled = sum(int(str(answer["sampled"])) for answer in answers)
        return sampled, sum(int(str(answer["answered"])) for answer in answers)

    def __exit__(self, *_exc: object) -> None:
        self._close()

    def _close(self) -> None:
        for child in self.children:
            if child.stdin:
                child.stdin.close()
        for child in self.children:
            child.wait(timeout=60)
        self._watchdog.cancel()

    def _kill(self) -> None:
        for child in self.children:
            child.kill()


def measure(
    host: str, port: int, connections: int, processes: int, broker_pid: int | None
) -> dict[str, object]:
    """Open, hold 3 s, measure the broker, check one connection in 100, close: the figures."""
    rss_before = broker_tree_rss_kib(broker_pid) if broker_pid else 0
    with HeldConnections(host, port, connections, processes, 120 + connections / 100) as held:
        time.sleep(3)
        rss_open = broker_tree_rss_kib(broker_pid) if broker_pid else 0
        spread = sockets_per_process(broker_pid) if broker_pid else {}
        sampled, answered = held.ping_sample()
    opened = held.opened
    result: dict[str, object] = {
        "connections": connections,
        "connected": opened.connected,
        "processes": processes,
        "seconds": round(opened.seconds, 2),
        "connects_per_s": round(opened.connected / opened.seconds),
        "sampled": sampled,
        "answered": answered,
        "errors": opened.errors,
    }
    if broker_pid:
        result["broker_rss_kib_before"] = rss_before
        result["broker_rss_kib_open"] = rss_open
        per_connection = (rss_open - rss_before) / max(opened.connected, 1)
        result["kib_per_connection"] = round(per_connection, 2)
        result["sockets_per_broker_process"] = spread
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--broker-pid", type=int, help="measure this process tree's RSS")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--source", default="127.0.0.2", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="hold", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        plan = ChildPlan(args.connections, args.source, args.prefix)
        run_child(args.host, args.port, plan, sys.stdin, sys.stdout)
        return 0
    result = measure(args.host, args.port, args.connections, args.processes, args.broker_pid)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["connected"] == args.connections else 1


if __name__ == "__main__":
    raise SystemExit(main())
