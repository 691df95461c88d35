"""A session's move between nodes (cluster/move_forwarding.py), in-process: frames out are
recorded, sessions are recorders of what they are told, and a `RoutesSync` round is
answered when the test says so."""

from __future__ import annotations

import gevent

from actors.messages import EndForwarding, MovedIn
from cluster.move_forwarding import MoveForwarding
from pool.frames.codec import Frame
from pool.frames.moves import MovedDeliveries, MoveEnded, MoveRoutesKnown, MovingOut
from tests.support.moves import Rounds, Session, delivery


class Node:
    """One worker's MoveForwarding with recorded frames, rounds and ended moves."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.sent: list[tuple[int, Frame]] = []
        self.rounds = Rounds()
        self.ended: list[str] = []
        self.forwarding = MoveForwarding(
            lambda worker, frame: self.sent.append((worker, frame)),
            self.rounds.append,
            timeout,
            self.ended.append,
        )

    def complete_rounds(self) -> None:
        self.rounds.complete()


def test_what_reaches_the_session_before_the_claimant_is_known_is_kept_then_sent() -> None:
    # The bucket's watch ended the session before the claimant's GiveUp named its worker.
    a, session = Node(), Session()
    move = a.forwarding.move_out("c", session)
    move.begin("bob", True, [], [])
    move.forward([delivery(1, 10)])
    assert a.sent == []
    a.forwarding.claim("c", 7)
    assert a.sent == [
        (7, MovingOut("c", "bob", 1, (), ())),
        (7, MovedDeliveries("c", (delivery(1, 10),))),
    ]
    move.forward([delivery(2, 11)])
    assert a.sent[-1] == (7, MovedDeliveries("c", (delivery(2, 11),)))
    a.forwarding.frame_received(7, MoveRoutesKnown("c"))
    a.complete_rounds()
    assert session.told == [EndForwarding()]
    move.end()  # the session left its routes
    assert a.sent[-1] == (7, MoveEnded("c"))
    assert a.ended == ["c"]
    assert not a.forwarding.forwarding("c")


def test_a_move_nobody_claims_ends_after_the_timeout() -> None:
    a, session = Node(timeout=0.01), Session()
    a.forwarding.move_out("c", session).begin(None, False, [], [])
    gevent.sleep(0.05)
    assert session.told == [EndForwarding()]
    assert a.sent == []


def test_forwarded_deliveries_lose_the_old_nodes_seqs() -> None:
    # The new node's store numbers apart: a forwarded delivery is known by its message id.
    b, session = Node(), Session()
    b.forwarding.frame_received(3, MovingOut("c", None, 0, (), ()))
    assert b.forwarding.arriving("c", 3) == MovingOut("c", None, 0, (), ())
    assert b.forwarding.arriving("c", 4) is None
    b.forwarding.frame_received(3, MovedDeliveries("c", (delivery(1, 10),)))
    b.forwarding.started("c", session)
    assert session.told == [MovedIn([delivery(1)])]
