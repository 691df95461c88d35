"""What a takeover of a session waits for, and what becomes of the waiting ones (pure).

A session is taken from its connection by another connection's attach, a clean start that
replaced it, or (in a pool) a hand-off to another worker. Its client sent what the old
connection already received before it connected again, so that counts first: a DISCONNECT
in it may end the session (section 3.14.2.2.2) and discards the will [MQTT-3.14.4-3]. A
takeover therefore waits until the attached connection has handled what it received
(`Wait.ASK`), or until it ended. Takeovers that come meanwhile queue behind the first
(`Wait.BEHIND`), each to wait for the connection attached before it, so in a reconnect
storm every connection gets its CONNACK before the next one takes it over.

A session that ends while takeovers wait passes each on (`Fate`): a hand-off is answered
once the session's delete is committed (the claimant finds no session), an attach opens as
if the session had not been there, unless a clean start replaced it: that one owns the
client id, and the earlier connections are closed as taken over.
"""

from __future__ import annotations

from enum import Enum


class Kind(Enum):
    ATTACH = "attach"
    HAND_OFF = "hand_off"
    CLEAN_START = "clean_start"


class Wait(Enum):
    NOW = "now"  # nothing to wait for: take the session now
    ASK = "ask"  # ask the attached connection to handle what it received; go on once it did
    BEHIND = "behind"  # behind the takeovers that wait already


class Fate(Enum):
    ANSWER = "answer"  # a hand-off: answered once the session's delete is committed
    REOPEN = "reopen"  # an attach: opens as if the session had not been there
    CLOSE = "close"  # an attach before a clean start that replaced the session: taken over


def waits(kind: Kind, queued: bool, attached: bool, own_connection: bool) -> Wait:
    """What a takeover of `kind` waits for. `queued`: others wait already; `attached`: a
    connection is attached; `own_connection`: an attach of that same connection."""
    if queued:
        return Wait.BEHIND
    if not attached or (kind is Kind.ATTACH and own_connection):
        return Wait.NOW
    return Wait.ASK


def fate(kind: Kind, replaced: bool) -> Fate | None:
    """What becomes of a waiting takeover when the session ends (None: nothing; a clean
    start that waited is why it ends)."""
    if kind is Kind.HAND_OFF:
        return Fate.ANSWER
    if kind is Kind.ATTACH:
        return Fate.CLOSE if replaced else Fate.REOPEN
    return None
