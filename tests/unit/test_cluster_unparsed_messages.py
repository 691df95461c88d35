"""Messages from a node of another broker version. One that does not parse (a frame layout
this node does not know) is dropped: the first of a series is logged with what to check,
the rest only counted until one from that sender parses again, which is then taken as any
other and logged with the count. A node of another version sends many, and one error line
each would flood the log. A worker whose `Hello` names another `FRAMES_VERSION` is not
linked (logged once, taken down if it was up) and what it sends is dropped, parsed or not,
until it greets with this version.

In-process: a real `NatsFabric`, not started, fed NATS messages as its link hands them over.
"""

from __future__ import annotations

import logging

import pytest

from cluster.config import ClusterConfig
from cluster.fabric import NatsFabric
from pool.frames.codec import Frame, encode_frame
from pool.frames.peers import FRAMES_VERSION, Hello
from pool.frames.routes import RoutesChanged

CLUSTER = ClusterConfig(name="t", node="b", nats=("nats://127.0.0.1:4222",))
GARBLED = b"\x03\x00\x00\x00\xfe\x00\x00\x00"  # a frame of kind 254, which no version has


class Heard:
    """The fabric's handler: what came up and which frames arrived."""

    def __init__(self) -> None:
        self.up: list[int] = []
        self.down: list[int] = []
        self.frames: list[Frame] = []

    def peer_up(self, worker: int, epoch: int) -> None:
        self.up.append(worker)

    def peer_down(self, worker: int) -> None:
        self.down.append(worker)

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


def test_a_worker_of_another_frames_version_is_not_linked_until_it_speaks_this_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard = Heard()
    fabric = NatsFabric(CLUSTER, 0, heard)
    caplog.set_level(logging.INFO, logger="cluster.fabric")
    changed = RoutesChanged(("a/#",), ())
    fabric._messages([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])
    assert heard.up == [1]  # linked: this version

    newer = encode_frame(Hello(0, 8, (), FRAMES_VERSION + 1))  # restarted on other code
    fabric._messages([("mqtt.t.all.a.0", newer + encode_frame(changed))])
    fabric._messages([("mqtt.t.all.a.0", newer)])
    fabric._messages([("mqtt.t.all.a.0", encode_frame(changed))])
    fabric._messages([("mqtt.t.all.a.0", GARBLED)])
    assert heard.down == [1]  # taken for gone at once
    assert heard.frames == []  # nothing it sent was taken
    versions = [r.getMessage() for r in caplog.records if "speaks frame version" in r.getMessage()]
    assert versions == [
        f"cluster: a.0 speaks frame version {FRAMES_VERSION + 1} and this node "
        f"{FRAMES_VERSION}: not linked, its messages dropped; run one broker version on every "
        "node of cluster 't'"
    ]
    assert "does not parse" not in caplog.text  # expected of it: not logged again

    fabric._messages([("mqtt.t.all.a.0", encode_frame(Hello(0, 9)) + encode_frame(changed))])
    assert heard.up == [1, 1] and heard.frames == [changed]
    assert "a.0 speaks this node's frames again" in caplog.text
