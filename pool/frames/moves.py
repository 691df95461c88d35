"""The frames that move sessions: a session handed over to another worker with what the
store does not hold, what reaches its old worker meanwhile, and a dead worker's sessions
adopted with the messages the others kept for them (docs/pool.md "One owner per client id",
"A worker dies")."""

from __future__ import annotations

from dataclasses import dataclass

from core.message import Message
from core.session_state import Delivery


@dataclass(frozen=True, slots=True)
class MovingOut:
    """From the previous owner to the claimant, before `HandedOver`: the sender gives the
    session of `client_id` up and, until `MoveEnded`, forwards what arrives for it
    (`MovedDeliveries`). What the store does not hold travels here: `username`, the
    session's last user (if `user_known`: a session restored at start-up has had none
    yet), and `qos0`, the QoS 0 deliveries of its queue; `after[i]` is the seq of the
    stored delivery that `qos0[i]` followed in the queue (0: none)."""

    client_id: str
    username: str | None
    user_known: int
    qos0: tuple[Delivery, ...]
    after: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MovedDeliveries:
    """From the previous owner: deliveries for the moving session of `client_id` that
    arrived after it was handed over, in arrival order (`seq` 0: not stored by the sender)."""

    client_id: str
    deliveries: tuple[Delivery, ...]


@dataclass(frozen=True, slots=True)
class MoveRoutesKnown:
    """From the claimant: the moved session's routes are known to every worker, so the
    previous owner can stop forwarding once what was already on its way has arrived."""

    client_id: str


@dataclass(frozen=True, slots=True)
class MoveEnded:
    """From the previous owner: nothing more is forwarded for `client_id`."""

    client_id: str


@dataclass(frozen=True, slots=True)
class Adopted:
    """From a worker that now hosts persistent sessions of the dead worker `dead` (its
    home re-hosted them, or `dead` restarted and restored them), with their routes known
    everywhere: send me what you acknowledged for that worker's sessions and could not
    give it (`Orphans`), then `CommitSync`. A worker that starts says it for its own
    earlier life. `round` tells the sender's adoptions apart (a CONNECT that was waiting
    for the dead worker's hand-over adopts its session in a round of its own)."""

    dead: int
    round: int


@dataclass(frozen=True, slots=True)
class Orphans:
    """The answer to `Adopted(dead)`: the QoS 1/2 messages the sender acknowledged (or had
    acknowledgements waiting on) for the persistent sessions of the dead worker `dead`
    that it cannot tell were stored, in order; the receiver gives each to the sessions it
    adopted from `dead` whose subscriptions match (none: an empty tuple)."""

    messages: tuple[Message, ...]
    dead: int = 0
    round: int = 0
