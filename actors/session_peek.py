"""A live session actor's state read in place, without a message to the actor: what the
operations surface and a lazy bridge count."""

from __future__ import annotations

from typing import Any

from core.session_state import SessionState


def session_state(session: Any) -> SessionState | None:
    """The state of a live session actor, read in place (None once it stopped).

    Reads pykka's weak reference from the ActorRef to its actor (pykka is pinned, and
    actors/runtime.py relies on its internals already): asking every session for a copy
    would put one message per session in the loop on every scrape.
    """
    actor = session._actor_weakref()
    return None if actor is None else actor.state


def messages_waiting(session: Any) -> int | None:
    """The messages waiting in a session for its client: queued and in flight (None once
    it stopped)."""
    state = session_state(session)
    if state is None:
        return None
    return len(state.inflight) + (len(state.queue) if state.queue else 0)
