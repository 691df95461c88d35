"""A NATS message from another node that does not parse (a node of another broker version
sends a frame layout this one does not know) is dropped: the first of a series is logged
with what to check, the rest only counted until one from that sender parses again, which
is then taken as any other and logged with the count. A node of another version sends many,
and one error line each would flood the log.

In-process: a real `NatsFabric`, not started, fed NATS messages as its link hands them over.
"""

from __future__ import annotations

import logging

import pytest

from cluster.config import ClusterConfig
from cluster.fabric import NatsFabric
from pool.frames.codec import Frame, encode_frame
from pool.frames.peers import Hello
from pool.frames.routes import RoutesChanged

CLUSTER = ClusterConfig(name="t", node="b", nats=("nats://127.0.0.1:4222",))
GARBLED = b"\x03\x00\x00\x00\xfe\x00\x00\x00"  # a frame of kind 254, which no version has


class Heard:
    """The fabric's handler: what came up and which frames arrived."""

    def __init__(self) -> None:
        self.up: list[int] = []
        self.frames: list[Frame] = []

    def peer_up(self, worker: int, epoch: int) -> None:
        self.up.append(worker)

    def peer_down(self, worker: int) -> None:
        pass

    def frames_received(self, worker: int, frames: list[Frame]) -> None:
        self.frames += frames


def test_one_error_for_a_series_of_unparsed_messages_then_the_count_once_one_parses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard = Heard()
    fabric = NatsFabric(CLUSTER, 0, heard)
    caplog.set_level(logging.INFO, logger="cluster.fabric")
    for _ in range(6):
        fabric._messages([("mqtt.t.all.a.0", GARBLED)])
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "a message from a.0 does not parse" in errors[0].getMessage()
    assert "run the same broker version" in errors[0].getMessage()
    assert heard.up == [] and heard.frames == []

    # Another sender's series is its own.
    fabric._messages([("mqtt.t.all.c.1", GARBLED)])
    assert sum("from c.1 does not parse" in r.getMessage() for r in caplog.records) == 1

    changed = RoutesChanged(("a/#",), ())
    body = encode_frame(Hello(0, 7)) + encode_frame(changed)
    fabric._messages([("mqtt.t.all.a.0", body)])
    assert heard.up == [1] and heard.frames == [changed]  # taken as any other message
    assert "messages from a.0 parse again; 6 were dropped" in caplog.text

    # A later unparsed message starts a new series, logged again.
    fabric._messages([("mqtt.t.all.a.0", GARBLED)])
    assert sum("from a.0 does not parse" in r.getMessage() for r in caplog.records) == 2
