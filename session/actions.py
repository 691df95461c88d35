"""What the session protocol answers with: the actions the session actor carries out.

Two outputs accumulate in the protocol instead of being returned one by one, because the
actor hands each over in one go when its mailbox is empty: the bytes for the attached
connection (`SessionProtocol.out`) and the store writes of a persistent session
(`SessionProtocol.writes`, in the order they must be applied). Everything else is answered
as a list, in the order it must happen:

- the `core.session_state` actions the actor reports: `Completed` (message.acked),
  `Dropped` (count, log, message.dropped), `Revoked` (session.unsubscribed) and
  `ProtocolViolation` (close the connection as a Protocol Error);
- `Delivered`: a delivery has gone out (message.delivered), answered only when asked for;
- `Close`: close the attached connection with this reason;
- `Reply`: bytes that promise something stored (SUBACK, PUBCOMP), written once `writes`
  are committed, or with `out` when nothing needs storing.

Store writes name what changes in the session's stored record; `actors.persistence` turns
them into the store's ops:

- `SaveSession`: the session's record (subscriptions, awaiting-PUBREL ids, expiry, next
  packet id), with the time its client went if it went;
- `DeleteRecord`: the record and every stored message of the session;
- `MarkSent`: these messages (seq, packet id) are in flight at `stage`;
- `Forget`: these messages left the session (acknowledged, dropped, taken by another);
- `PutDelivery`: a delivery this session stores itself (one forwarded in a pool's move).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.reasons import DisconnectReason
from core.session_state import Completed, Delivery, Dropped, ProtocolViolation, Revoked


@dataclass(slots=True)
class SaveSession:
    disconnected_at: float | None = None
    # The subscriptions changed since the last SaveSession (their stored form is rebuilt).
    subscriptions_changed: bool = False


@dataclass(slots=True)
class DeleteRecord:
    pass


@dataclass(slots=True)
class MarkSent:
    stage: str  # `Stage.value`
    marks: list[tuple[int, int]]  # (seq, packet id), one run of one stage


@dataclass(slots=True)
class Forget:
    seqs: list[int]


@dataclass(slots=True)
class PutDelivery:
    seq: int
    delivery: Delivery


StoreWrite = SaveSession | DeleteRecord | MarkSent | Forget | PutDelivery


@dataclass(slots=True)
class Delivered:
    delivery: Delivery


@dataclass(slots=True)
class Close:
    reason: DisconnectReason
    detail: str = ""


@dataclass(slots=True)
class Reply:
    data: bytes
    # Written once these are committed; None: with the other bytes (`out`), nothing to wait for.
    writes: list[StoreWrite] | None = None


Report = Completed | Dropped | Revoked | ProtocolViolation | Delivered | Close
