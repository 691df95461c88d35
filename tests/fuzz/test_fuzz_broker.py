"""Fuzz a running broker with mutated MQTT streams while well-behaved clients talk through it.

Each fuzz session is drawn by hypothesis from the codec's own strategies
(`tests.property.test_codec_properties`): a protocol version, a valid CONNECT (or none), a
few valid packets of any type, each possibly broken by one of `tests.fuzz.mutations` (bad
flags, lengths and varints, flipped and truncated bytes, invalid UTF-8 and U+0000, wildcards
in PUBLISH topics, duplicated and misplaced MQTT 5 properties), and an ending: close, more
packets after DISCONNECT, or part of a packet followed by silence.

Meanwhile a paho publisher sends QoS 1 messages to a paho subscriber. At the end:
- the broker is alive and its log holds no traceback;
- the well-behaved clients were never disconnected and every message arrived, in order;
- the broker's file descriptors are back where they started, its RSS did not keep growing
  (summed over its processes: with `--workers 2` the supervisor, workers and store process).

The duration is `FUZZ_SECONDS` (default 60, what CI runs). An hour:

    FUZZ_SECONDS=3600 .venv/bin/python -m pytest tests/fuzz -q -o log_cli=true --log-cli-level=INFO

(the last log line gives the figures: sessions, good messages, descriptors, RSS).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
import psutil
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from mqtt import Connect, Disconnect, PingReq, encode
from tests.fuzz.mutations import BUILT_MUTATIONS, ENCODED_MUTATIONS, Mutation
from tests.property.test_codec_properties import _connects, packets
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, unique

logger = logging.getLogger(__name__)

FUZZ_SECONDS = float(os.environ.get("FUZZ_SECONDS", "60"))
CLIENT_IDS = 50  # fuzz sessions reuse these ids, so persistent ones stay few
MAX_SILENT = 100  # connections held open after a partial packet
SESSION_READ_LIMIT = 1.0  # seconds a fuzz session reads the broker's answers at the most
CONFIG = """
[limits]
connect_timeout = 2.0
session_expiry = 5.0

[overload]
max_stall = 2.0
"""


class TimeUpError(Exception):
    """The time is up (raised out of the hypothesis loop)."""


@dataclasses.dataclass
class FuzzSession:
    version: int
    connect: Connect | None
    packets: list[tuple[Any, Mutation | None]]
    ending: str
    seed: int


_MUTATIONS: list[Mutation | None] = [None, None, *ENCODED_MUTATIONS, *BUILT_MUTATIONS]


@st.composite
def fuzz_sessions(draw: st.DrawFn) -> FuzzSession:
    version = draw(st.sampled_from([3, 4, 5]))
    connect = draw(st.none() | _connects(version) | _connects(version) | _connects(version))
    if connect is not None:
        client_id = f"fuzz-{draw(st.integers(0, CLIENT_IDS - 1))}"
        connect = dataclasses.replace(connect, client_id=client_id)
    body = draw(
        st.lists(
            st.tuples(
                packets(version).filter(lambda p: not isinstance(p, Connect)),
                st.sampled_from(_MUTATIONS),
            ),
            max_size=6,
        )
    )
    ending = draw(st.sampled_from(["close", "close", "after_disconnect", "silence"]))
    return FuzzSession(version, connect, body, ending, draw(st.integers(0, 2**32)))


def stream(session: FuzzSession) -> bytes:
    rng = random.Random(session.seed)
    out = [encode(session.connect, session.version)] if session.connect else []
    for packet, mutation in session.packets:
        data = encode(packet, session.version)
        out.append(mutation(data, session.version, rng) if mutation else data)
    if session.ending == "after_disconnect":
        out += [encode(Disconnect(), session.version), encode(PingReq(), session.version)]
        out += [encode(packet, session.version) for packet, _ in session.packets[:2]]
    data = b"".join(out)
    if session.ending == "silence" and len(data) > 1:
        data = data[: rng.randrange(1, len(data))]
    return data


class GoodTraffic:
    """A paho publisher sending numbered QoS 1 messages to a paho subscriber."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.topic = unique("good")
        self.subscriber = PahoCollector(broker, unique("good-sub"))
        assert self.subscriber.subscribe(self.topic, 1)[0].value == 1
        self.publisher = PahoCollector(broker, unique("good-pub"))
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish, daemon=True)
        self._thread.start()

    def _publish(self) -> None:
        while not self._stop.is_set():
            info = self.publisher.client.publish(self.topic, str(self.sent).encode(), 1)
            info.wait_for_publish(10)
            assert info.rc == paho.MQTT_ERR_SUCCESS
            self.sent += 1
            time.sleep(0.02)

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(15)
        received = [int(self.subscriber.next_message(10).payload) for _ in range(self.sent)]
        assert received == list(range(self.sent))
        assert not self.publisher.disconnected.is_set()
        assert not self.subscriber.disconnected.is_set()
        self.publisher.close()
        self.subscriber.close()


def _tree(pid: int) -> list[psutil.Process]:
    """The broker's processes: one, or a pool's supervisor, workers and store process."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _open_fds(pid: int) -> int:
    return sum(process.num_fds() for process in _tree(pid))


def _rss(pid: int) -> int:
    return sum(process.memory_info().rss for process in _tree(pid))


def _send(broker: BrokerProcess, session: FuzzSession) -> socket.socket | None:
    """Send one fuzz session; return its socket if it is to be held silent, else None."""
    data = stream(session)
    sock = socket.create_connection((broker.host, broker.port), timeout=2)
    try:
        sock.sendall(data)
        if session.ending == "silence":
            return sock
        sock.settimeout(0.05)
        # Whatever the broker answers, until it closes or is quiet, for at most
        # SESSION_READ_LIMIT: a session that subscribed to a filter the good clients' topic
        # matches ('#', say) receives a message every ~20 ms and is never quiet for 50 ms.
        until = time.monotonic() + SESSION_READ_LIMIT
        while sock.recv(65536) and time.monotonic() < until:
            pass
    except OSError:
        pass  # reset or timed out: both are answers
    sock.close()
    return None


@pytest.mark.timeout(FUZZ_SECONDS + 180)
def test_fuzzed_input_never_breaks_the_broker_or_its_good_clients(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(CONFIG)
    pid = broker.process.pid
    good = GoodTraffic(broker)
    fds_before = _open_fds(pid)
    started = time.monotonic()
    deadline = started + FUZZ_SECONDS
    silent: list[tuple[float, socket.socket]] = []
    sessions = 0
    rss_warm: int | None = None

    @settings(
        max_examples=10**9,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(session=fuzz_sessions())
    def fuzz_one(session: FuzzSession) -> None:
        nonlocal sessions, rss_warm
        now = time.monotonic()
        if now >= deadline:
            raise TimeUpError
        if rss_warm is None and now - started >= FUZZ_SECONDS / 4:
            rss_warm = _rss(pid)
        held = _send(broker, session)
        sessions += 1
        if held is not None:
            silent.append((now + random.uniform(0.5, 4.0), held))
        while silent and (silent[0][0] <= now or len(silent) > MAX_SILENT):
            silent.pop(0)[1].close()
        assert broker.process.poll() is None, broker.log()[-5000:]

    with pytest.raises(TimeUpError):
        fuzz_one()
    for _, sock in silent:
        sock.close()

    assert broker.process.poll() is None, broker.log()[-5000:]
    good.finish()
    assert sessions >= FUZZ_SECONDS  # the premise: it really fuzzed (>= 1 session a second)
    time.sleep(3.0)  # connect timeouts and session expiry run out
    assert _open_fds(pid) <= fds_before + 2, (fds_before, _open_fds(pid))
    assert rss_warm is not None
    rss_end = _rss(pid)
    assert rss_end <= rss_warm * 1.25 + 16 * 1024 * 1024, (rss_warm, rss_end)
    log = broker.log()
    assert "Traceback" not in log, log[-20000:]
    logger.info(
        "fuzzed %d sessions in %.0f s; good messages %d; fds %d -> %d; RSS %d -> %d KiB",
        sessions,
        FUZZ_SECONDS,
        good.sent,
        fds_before,
        _open_fds(pid),
        rss_warm // 1024,
        rss_end // 1024,
    )
    assert broker.stop() == 0
