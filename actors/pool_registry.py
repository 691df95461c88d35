"""PoolRegistry: the session registry of a pool worker, one owner per client id pool-wide.

A CONNECT that passed authentication comes here as in one broker (`SessionRegistry.open`),
but before the session is opened the id is claimed from its home worker (docs/pool.md):

1. `claim`: the home's arbiter grants one claim per id at a time and names the previous
   owner. Connections with one id on this worker take their turns (one claim each, in
   order), so a reconnect storm ends with exactly one session per id. A home that finds
   the id banned refuses the claim instead (`ClaimRefused`, actors.pool_admission), and
   the CONNECT is refused with CONNACK 0x8A (3.1.1: 0x05), its session never opened.
2. If the previous owner is another worker, it is asked to hand the session over: it closes
   its connection (a takeover, the will as usual [MQTT-3.1.4-2]), commits the session's
   state to the store (or deletes it for a clean start [MQTT-3.1.2-4]) and answers.
3. Without a session here, a connection that resumes (clean start 0) loads the id's
   session from the store, the pool's single source of session state, and the CONNACK says
   whether one was there [MQTT-3.2.2-2]; then the session is opened as in one broker.
4. `Settled` tells the home this worker holds the id; a session that ends `Release`s it.

The claim and hand-over wait on other workers, so a CONNECT that waits runs them in a
greenlet of its own; the connection meanwhile waits for its CONNACK as it would for a slow
store. Half the ids are homed on the worker that accepted them (with two workers): when
the arbiter here grants such a claim at once and there is no session to hand over or load,
the session opens at once, with no greenlet, as in one broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import gevent
import gevent.lock

from actors.context import BrokerContext
from actors.messages import ConnectRefused
from actors.pool_node import PoolNode
from actors.runtime import run_soon, tell_if_alive
from actors.session_registry import SessionRegistry
from actors.transport import Transport
from core.client import ClientInfo
from fabric.frames import ClaimRefused, Granted
from mqtt.reason_codes import ReasonCode

logger = logging.getLogger(__name__)


class _Turn:
    """The connections of one client id waiting on this worker, served one at a time."""

    __slots__ = ("lock", "waiting")

    def __init__(self) -> None:
        self.lock = gevent.lock.Semaphore()
        self.waiting = 0


class PoolRegistry(SessionRegistry):
    def __init__(
        self,
        context: BrokerContext,
        sessions: dict[str, Any],
        node: PoolNode,
        resume: Callable[[str], Any],
    ) -> None:
        """`resume(client_id)` loads the id's stored session and starts it detached (its
        actor ref), or returns None if the store has none."""
        super().__init__(context, sessions)
        self._node = node
        self._resume = resume
        self._turns: dict[str, _Turn] = {}

    def open(
        self,
        client: ClientInfo,
        client_ref: Any,
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None:
        client_id = client.client_id
        node = self._node
        claim: Callable[[], Granted | ClaimRefused | None]
        if client_id in self._turns:  # an earlier connection of the id waits: after it
            claim = partial(node.claim, client_id)
        else:
            granted = node.claim_now(client_id)
            if granted is not None and self._opens_at_once(client, granted):
                self._open_claimed(client, client_ref, transport, connack_properties, granted)
                return
            claim = partial(node.claim, client_id) if granted is None else lambda: granted
        turn = self._turns.get(client_id)
        if turn is None:
            turn = self._turns[client_id] = _Turn()
        turn.waiting += 1
        # A parked pool greenlet: a new one would map and unmap a frame stack of its own.
        run_soon(
            partial(
                self._open_in_turn,
                turn,
                client_id,
                lambda: self._open_claimed(
                    client, client_ref, transport, connack_properties, claim()
                ),
            )
        )

    def _opens_at_once(self, client: ClientInfo, granted: Granted | ClaimRefused) -> bool:
        """Whether the session opens without a wait: no other worker hands one over and
        nothing is loaded from the store."""
        if isinstance(granted, ClaimRefused):
            return True
        previous = granted.previous
        return previous == self._node.worker or (previous is None and client.clean_start)

    def _open_in_turn(self, turn: _Turn, client_id: str, open_claimed: Callable[[], None]) -> None:
        try:
            with turn.lock:
                open_claimed()
        finally:
            turn.waiting -= 1
            if not turn.waiting:
                del self._turns[client_id]

    def _open_claimed(
        self,
        client: ClientInfo,
        client_ref: Any,
        transport: Transport,
        connack_properties: dict[int, Any],
        granted: Granted | ClaimRefused | None,
    ) -> None:
        """Open the session of a claim's answer (None: the home did not answer, and this
        worker goes on as the only claimant)."""
        if isinstance(granted, ClaimRefused):
            # Banned at the home (flapping detection there counted this very CONNECT, or
            # the ban has not reached this worker yet): refused as one process refuses it.
            tell_if_alive(client_ref, ConnectRefused(ReasonCode.BANNED, granted.reason))
            return
        node = self._node
        client_id = client.client_id
        previous = granted.previous if granted is not None else None
        if previous is not None and previous != node.worker:
            node.hand_over(previous, client_id, discard=client.clean_start)
        session = self.sessions.get(client_id)
        if session is None and not client.clean_start and previous != node.worker:
            session = self._resume(client_id)
            if session is not None:
                self.sessions[client_id] = session
        if client_ref.is_alive():
            super().open(client, client_ref, transport, connack_properties)
        if granted is not None:
            node.settle(client_id, has_session=client_id in self.sessions)

    def adopt_restored(self, client_id: str, session: Any) -> None:
        """A session this worker re-hosts (its owner died): it holds the id now."""
        self.sessions[client_id] = session

    def ended(self, client_id: str, session: Any) -> None:
        """The session of `client_id` ended: the id is released once the store has
        committed what the session submitted before (its deletion, or its state when it is
        handed off), so the next owner, which loads the id's session from the store, never
        finds a session that ended."""
        if self.sessions.get(client_id) is session:
            del self.sessions[client_id]
            self._context.persistence.submit((), lambda: self._release(client_id))

    def _release(self, client_id: str) -> None:
        # A CONNECT for the id on this worker meanwhile claimed it again (its claim finds
        # this worker the owner) or holds it: that claim settles or releases the id.
        if client_id not in self.sessions and client_id not in self._turns:
            self._node.release(client_id)
