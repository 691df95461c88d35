"""The per-client-id state of sessions moving between pool workers (pool/session_moves.py),
in-process: frames out are recorded, sessions are recorders of what they are told, and a
`RoutesSync` round is answered when the test says so.
"""

from __future__ import annotations

import gevent
import pytest

import pool.session_moves
from actors.messages import EndForwarding, ForwardingEnded, MovedIn, MoveSettled
from pool.frames.codec import Frame
from pool.frames.moves import MovedDeliveries, MoveEnded, MoveRoutesKnown, MovingOut
from pool.frames.ownership import HandOver
from pool.session_moves import SessionMoves
from tests.support.moves import Rounds, Session, delivery


class Worker:
    """One worker's SessionMoves with recorded frames, rounds and answered hand-overs."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Frame]] = []
        self.rounds = Rounds()
        self.handed: list[HandOver] = []
        self.moves = SessionMoves(
            lambda worker, frame: self.sent.append((worker, frame)),
            self.rounds.append,
            self.handed.append,
        )

    def complete_rounds(self) -> None:
        self.rounds.complete()


def test_the_previous_owner_forwards_until_the_round_after_the_new_routes() -> None:
    a, session = Worker(), Session()
    move = a.moves.move_out("c", 1, session)
    assert a.moves.outgoing == {}  # nothing until the session begins (a stored one)
    move.begin("bob", True, [delivery(9)], [4])
    assert a.sent == [(1, MovingOut("c", "bob", 1, (delivery(9),), (4,)))]
    move.forward([delivery(1, 10), delivery(2, 12)])
    assert a.sent[-1] == (1, MovedDeliveries("c", (delivery(1, 10), delivery(2, 12))))
    a.moves.claimant_routes_known(0, "c")  # not the claimant: ignored
    assert a.rounds.waiting == []
    a.moves.claimant_routes_known(1, "c")
    assert session.told == []  # one round first: what was on its way to this worker arrives
    a.complete_rounds()
    assert session.told == [EndForwarding()]
    move.end()
    assert a.sent[-1] == (1, MoveEnded("c"))
    assert a.moves.outgoing == {}


def test_the_new_owner_buffers_until_started_and_holds_hand_overs_until_the_end() -> None:
    b, session = Worker(), Session()
    b.moves.moving_in(0, MovingOut("c", "bob", 1, (), ()))
    assert b.moves.arriving("c") == MovingOut("c", "bob", 1, (), ())
    b.moves.forwarded(0, MovedDeliveries("c", (delivery(1, 10),)))
    b.moves.forwarded(1, MovedDeliveries("c", (delivery(7, 11),)))  # not from the source
    b.moves.started("c", session)
    assert session.told == [MovedIn([delivery(1, 10)])]
    b.moves.forwarded(0, MovedDeliveries("c", (delivery(2, 12),)))
    assert session.told[-1] == MovedIn([delivery(2, 12)])
    b.moves.routes_known("c")
    b.moves.routes_known("c")
    assert b.sent == [(0, MoveRoutesKnown("c"))]  # once
    next_owner = HandOver("c", 1, 0)
    assert b.moves.defer_hand_over(next_owner)
    b.moves.ended(0, MoveEnded("c"))
    assert session.told[-1] == ForwardingEnded(0)
    assert b.handed == [next_owner]  # answered now
    assert b.moves.arriving("c") is None
    b.complete_rounds()
    assert session.told[-1] == MoveSettled()
    assert not b.moves.defer_hand_over(HandOver("c", 1, 0))


def test_a_worker_going_down_ends_its_moves_both_ways() -> None:
    worker, leaving, arriving = Worker(), Session(), Session()
    worker.moves.move_out("out", 2, leaving).begin(None, False, [], [])
    worker.moves.moving_in(2, MovingOut("in", None, 0, (), ()))
    worker.moves.started("in", arriving)
    worker.moves.peer_down(1)  # another worker: nothing changes
    assert (leaving.told, arriving.told) == ([], [])
    worker.moves.peer_down(2)
    assert leaving.told == [EndForwarding()]
    assert arriving.told == [ForwardingEnded(2)]
    assert worker.moves.incoming == {}


def test_a_session_that_stopped_ends_its_forwarding_at_once() -> None:
    a, session = Worker(), Session()
    move = a.moves.move_out("c", 1, session)
    move.begin(None, False, [], [])
    session.alive = False
    a.moves.claimant_routes_known(1, "c")
    a.complete_rounds()
    assert a.sent[-1] == (1, MoveEnded("c"))
    assert a.moves.outgoing == {}


def test_moves_that_do_not_end_in_time_end_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(pool.session_moves, "MOVE_TIMEOUT", 0.01)
    # B waits twice A's timeout for the end: 0.02 s.
    worker, leaving, arriving = Worker(), Session(), Session()
    worker.moves.move_out("out", 1, leaving).begin(None, False, [], [])
    worker.moves.moving_in(1, MovingOut("in", None, 0, (), ()))
    worker.moves.started("in", arriving)
    gevent.sleep(0.1)
    assert leaving.told == [EndForwarding()]
    assert arriving.told == [ForwardingEnded(1)]
    assert "did not confirm its routes" in caplog.text
    assert "did not end its forwarding" in caplog.text
