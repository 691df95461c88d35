"""PoolRegistry: the session registry of a pool worker, one owner per client id pool-wide.

A CONNECT that passed authentication comes here as in one broker (`SessionRegistry.open`),
but before the session is opened the id is claimed from its home worker (docs/pool.md):

1. `claim`: the home's arbiter grants one claim per id at a time and names the previous
   owner. Connections with one id on this worker take their turns (one claim each, in
   order), so a reconnect storm ends with exactly one session per id. A home that finds
   the id banned refuses the claim instead (`ClaimRefused`, pool.admission), and
   the CONNECT is refused with CONNACK 0x8A (3.1.1: 0x05), its session never opened.
2. If the previous owner is another worker, it is asked to hand the session over: it closes
   its connection (a takeover, the will as usual [MQTT-3.1.4-2]), commits the session's
   state to the store (or deletes it for a clean start [MQTT-3.1.2-4]) and answers.
3. Without a session here, a connection that resumes (clean start 0) loads the id's
   session from the store, the pool's single source of session state, and the CONNACK says
   whether one was there [MQTT-3.2.2-2]; then the session is opened as in one broker. While
   the store process is away (restarting) the load waits for it, at most `[store]
   connect_wait` seconds counted from step 2 (at least MIN_WAIT for the load itself); then
   the CONNECT is refused with CONNACK 0x88 Server unavailable (3.1.1: 3) and the id given
   back, its stored session untouched.
4. `Settled` tells the home this worker holds the id; a session that ends `Release`s it.

The claim's answer comes back as a callback (no greenlet waits for it); the session is then
opened in a pool greenlet, where the hand-over and the store load may wait. The connection
meanwhile waits for its CONNACK as it would for a slow store. Half the ids are homed on the
worker that accepted them (with two workers): when the arbiter here grants such a claim at
once and there is no session to hand over or load, the session opens at once, with no
greenlet, as in one broker.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from actors.context import BrokerContext
from actors.messages import ClientMessage, ConnectRefused
from actors.refs import Ref
from actors.runtime import run_soon, tell_if_alive
from actors.session_registry import SessionRegistry
from core.client import ClientInfo
from mqtt.reason_codes import ReasonCode
from net.transport import Transport
from pool.frames.ownership import ClaimRefused, Granted
from pool.node import ClaimAnswer, PoolNode
from store.base import StoreError

logger = logging.getLogger(__name__)

MIN_WAIT = 0.5  # seconds the store load gets when the hand-over took the CONNECT's bound
_Opening = Callable[[ClaimAnswer], None]  # opens one CONNECT's session, given its claim's answer


class PoolRegistry(SessionRegistry):
    def __init__(
        self,
        context: BrokerContext,
        sessions: dict[str, Any],
        node: PoolNode,
        resume: Callable[[str, float, int | None], Any],
    ) -> None:
        """`resume(client_id, wait)` loads the id's stored session and starts it detached
        (its actor ref), or returns None if the store has none; it waits at most `wait`
        seconds for a store that is away, then raises StoreError."""
        super().__init__(context, sessions)
        self._node = node
        self._resume = resume
        # The ids being opened here: the connections of each id waiting for their turn.
        self._turns: dict[str, deque[_Opening]] = {}

    def open(
        self,
        client: ClientInfo,
        client_ref: Ref[ClientMessage],
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None:
        client_id = client.client_id
        opening = partial(self._open_claimed, client, client_ref, transport, connack_properties)
        waiting = self._turns.get(client_id)
        if waiting is not None:  # an earlier connection of the id is being opened: after it
            waiting.append(opening)
            return
        granted = self._node.claim_now(client_id)
        if granted is not None and self._opens_at_once(client, granted):
            opening(granted)
            return
        self._turns[client_id] = deque()
        if granted is None:
            self._claim(client_id, opening)
        else:
            run_soon(partial(self._open_in_turn, client_id, opening, granted))

    def _opens_at_once(self, client: ClientInfo, granted: Granted | ClaimRefused) -> bool:
        """Whether the session opens without a wait: no other worker hands one over and
        nothing is loaded from the store."""
        if isinstance(granted, ClaimRefused):
            return True
        previous = granted.previous
        return previous == self._node.worker or (previous is None and client.clean_start)

    def _claim(self, client_id: str, opening: _Opening) -> None:
        self._node.claim(
            client_id,
            lambda granted: run_soon(partial(self._open_in_turn, client_id, opening, granted)),
        )

    def _open_in_turn(self, client_id: str, opening: _Opening, granted: ClaimAnswer) -> None:
        """In a pool greenlet, as the hand-over and the store load wait; then the next
        connection of the id waiting here claims it."""
        try:
            opening(granted)
        finally:
            waiting = self._turns[client_id]
            if waiting:
                self._claim(client_id, waiting.popleft())
            else:
                del self._turns[client_id]

    def _open_claimed(
        self,
        client: ClientInfo,
        client_ref: Any,
        transport: Transport,
        connack_properties: dict[int, Any],
        granted: ClaimAnswer,
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
        if self.fenced_out(client, client_ref):  # a later claim elsewhere won: take nothing
            if granted is not None:
                self._answer_fenced(client_id, granted)
            return
        deadline = time.monotonic() + self._context.config.store.connect_wait
        previous = granted.previous if granted is not None else None
        died = None
        if (
            previous is not None
            and previous != node.worker
            and not node.hand_over(previous, client_id, discard=client.clean_start)
        ):
            died = previous
        session = self.sessions.get(client_id)
        if session is None and not client.clean_start and previous != node.worker:
            # A session whose owner died is adopted here, with what the other workers kept
            # for it (docs/pool.md "A worker dies").
            adoption = None if died is None else node.adoptions.begin(died)
            try:
                # The hand-over counts too; a store that answers at once is always asked.
                wait = max(deadline - time.monotonic(), MIN_WAIT)
                session = self._resume(client_id, wait, adoption)
            except StoreError as error:
                self._refuse_unavailable(client, client_ref, error)
                if granted is not None:
                    node.settle(client_id, has_session=client_id in self.sessions)
                return
            finally:
                if adoption is not None:
                    fabric = node.fabric
                    node.adoptions.announce(adoption, fabric.peers if fabric is not None else ())
            if session is not None:
                self.sessions[client_id] = session
        if client_ref.is_alive():
            super().open(client, client_ref, transport, connack_properties)
        if granted is not None:
            node.settle(client_id, has_session=client_id in self.sessions)

    def _answer_fenced(self, client_id: str, granted: Granted) -> None:
        """Tell the home what became of a grant whose CONNECT the cluster's fence refused
        before anything was taken: a session another worker holds stays there (the watch
        fences it in turn if its own claim is older), and so does the id."""
        node = self._node
        if granted.previous is not None and granted.previous != node.worker:
            node.decline(client_id)
        else:
            node.settle(client_id, has_session=client_id in self.sessions)

    def _refuse_unavailable(self, client: ClientInfo, client_ref: Any, error: StoreError) -> None:
        """The id's stored session cannot be loaded (the store process is away): CONNACK
        0x88, one log line; the client connects again later."""
        logger.warning(
            "client %r: refused CONNECT with server unavailable: its session could not be "
            "loaded from the store within %.1f s ([store] connect_wait): %s",
            client.client_id,
            self._context.config.store.connect_wait,
            error,
        )
        tell_if_alive(
            client_ref,
            ConnectRefused(ReasonCode.SERVER_UNAVAILABLE, "the session store is unavailable"),
        )

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
