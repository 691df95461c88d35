"""The frames workers exchange over the fabric: pure bytes <-> frame objects, no I/O.

A frame is a 4-byte little-endian body length, a 1-byte kind, then the body (the layout of
the store process's frames, `store.process_protocol`). Control frames have an orjson body.
`Forward` and `Retained` carry messages: their message part is the message count and the
size of the string table (two 4-byte lengths), the string table (an orjson list: `null`, then
each distinct topic, client id and username of the frame once), one fixed-size binary record
per message (flags, timestamp, id, string indexes, sizes: `_MESSAGE_RECORD`), then each
message's MQTT 5 property block (the codec's own encoding, so binary values travel as they
are) and its payload, raw, or instead the PUBLISH a 3.x client sent for a QoS 0 message
(`Message.wire`, which ends with the payload), so the receiving worker writes it to QoS 0
subscribers as it is instead of encoding it again. The records decode in one `struct` pass
and the strings once per frame, not once per message: decoding is what a worker pays for
every message another worker forwards it. A `Forward`'s body starts with its 4-byte
publisher id. `ForwardShared` is a `Forward` whose messages are also (or only) for share
groups: after the publisher id, a 4-byte length and an orjson list of one `ShareMark` per
message, then the message part.
Nothing is pickled and no actor reference crosses the link: a peer may be another process
or, later, another machine (docs/pool.md).

`FrameDecoder.feed(bytes)` is incremental: a link is a byte stream, and a read may end in
the middle of a frame. A frame that does not parse raises `FrameError`; the link that sent
it is broken and is closed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

import orjson

from core.message import Message, stored_message
from core.session_state import Delivery
from core.share_origin import ShareMark, ShareOrigin
from mqtt.errors import MqttError
from mqtt.packets import PacketType
from mqtt.properties import encode_properties, read_properties

_FRAME_HEADER = struct.Struct("<IB")
_U32 = struct.Struct("<I")
_U32x2 = struct.Struct("<II")
# A message's fixed-size record: flags (QoS in bits 0-1, RETAIN in bit 2), timestamp, message
# id, the indexes of its topic, publisher and username in the frame's string table, and the
# sizes of its property block, its payload and the PUBLISH head before it (0: no `wire`).
_MESSAGE_RECORD = struct.Struct("<BdQIIIIII")
_QOS_BITS = 0b011
_RETAIN_FLAG = 0b100
_FLAG_BITS = _QOS_BITS | _RETAIN_FLAG
_INFINITY = float("inf")
_PLAIN_QOS0_PUBLISH = 0x30  # the first byte of a 3.x QoS 0 PUBLISH without DUP or RETAIN
_MIN_PUBLISH_HEAD = 5  # that byte, a 1-byte length, a topic of at least 1 byte [MQTT-4.7.3-1]
# The reasons of `FlowHold`/`FlowRelease`: core.flow.FlowState's values for a held publisher.
FLOW_REASONS = ("flow", "blocked")
MAX_FRAME = 256 * 1024 * 1024  # a frame longer than this is a broken link, not a big batch


class FrameError(ValueError):
    """Bytes that are not a valid frame: the link is broken and must be closed."""


@dataclass(frozen=True, slots=True)
class Hello:
    """The first frame on a link: who is talking, and which life of that worker it is."""

    worker: int
    epoch: int


@dataclass(frozen=True, slots=True)
class RoutesChanged:
    """Filters the sender now has local subscribers for, and filters it no longer has."""

    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RoutesSnapshot:
    """Every filter the sender has local subscribers for; replaces what the peer knew."""

    filters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Forward:
    """Messages of one publish batch for the receiver's local subscribers, in order.
    `publisher`: the sender's flow-control id of the connection that published them (0:
    none), which the receiver names in `FlowHold`/`FlowRelease`."""

    messages: tuple[Message, ...]
    publisher: int = 0


@dataclass(frozen=True, slots=True)
class ForwardShared:
    """A `Forward` whose messages are also (or only) for share groups the sender picked the
    receiver for: `marks[i]` says what message `i` is for."""

    messages: tuple[Message, ...]
    marks: tuple[ShareMark, ...]
    publisher: int = 0  # as `Forward`'s

    def __post_init__(self) -> None:
        if len(self.marks) != len(self.messages):
            raise ValueError(f"{len(self.marks)} share marks for {len(self.messages)} messages")


@dataclass(frozen=True, slots=True)
class SharesChanged:
    """The sender's number of local members of each share group (`$share/{group}/{filter}`)
    whose number changed; 0: it has none left."""

    filters: tuple[str, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_counts(self.filters, self.counts)


@dataclass(frozen=True, slots=True)
class SharesSnapshot:
    """Every share group the sender has local members of, with their number; replaces what
    the peer knew of the sender's groups."""

    filters: tuple[str, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_counts(self.filters, self.counts)


def _check_counts(filters: tuple[str, ...], counts: tuple[int, ...]) -> None:
    if len(filters) != len(counts) or any(count < 0 for count in counts):
        raise ValueError(f"share counts {counts!r} for the groups {filters!r}")


@dataclass(frozen=True, slots=True)
class Retained:
    """Retained messages set (payload) or cleared (empty payload), for every worker's index."""

    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class Claim:
    """To the client id's home: `claimant` wants to own `client_id`."""

    client_id: str
    claimant: int


@dataclass(frozen=True, slots=True)
class Granted:
    """From the home: the claim is granted; `previous` owned the id (None: nobody)."""

    client_id: str
    claimant: int
    previous: int | None


@dataclass(frozen=True, slots=True)
class ClaimRefused:
    """From the home, instead of `Granted`: `client_id` is banned (flapping detection there
    counted this CONNECT, or a ban the claimant had not heard of yet). The claimant refuses
    the CONNECT with CONNACK 0x8A; `reason` is its Reason String."""

    client_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Connecting:
    """To the client id's home: a CONNECT of `client_id` reached admission on the sender;
    the home's flapping detection counts it (`pool.admission`)."""

    client_id: str


@dataclass(frozen=True, slots=True)
class Settled:
    """To the home: `owner`, granted the id, now holds its session; the next claim may go."""

    client_id: str
    owner: int


@dataclass(frozen=True, slots=True)
class Release:
    """To the home: `owner` no longer owns `client_id` (its session ended or moved on)."""

    client_id: str
    owner: int


@dataclass(frozen=True, slots=True)
class HandOver:
    """To the previous owner: `claimant` was granted `client_id`; close its connection and
    give the session up (clean = 1: discard it [MQTT-3.1.2-4]), then answer `HandedOver`."""

    client_id: str
    claimant: int
    clean: int


@dataclass(frozen=True, slots=True)
class HandedOver:
    """To the claimant: the sender holds no session for `client_id` any more, and what it had
    is committed to the store (a discarded one is deleted there)."""

    client_id: str


@dataclass(frozen=True, slots=True)
class Owned:
    """To a worker whose link just came up: the ids homed at it that `owner` owns, so that a
    restarted home knows its ids' owners again (and does not restore their sessions)."""

    owner: int
    client_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RoutesSync:
    """Answer `RoutesSynced(token)` once everything sent before on this link is applied: a
    worker learns that its new routes are known before it sends SUBACK."""

    token: int


@dataclass(frozen=True, slots=True)
class RoutesSynced:
    """The answer to `RoutesSync(token)`."""

    token: int


@dataclass(frozen=True, slots=True)
class CommitSync:
    """Sent after a `Forward` with QoS 1/2 messages: answer `Committed(token)` once the store
    ops of everything received before are committed (the publisher's PUBACK waits)."""

    token: int


@dataclass(frozen=True, slots=True)
class Committed:
    """The answer to `CommitSync(token)`."""

    token: int


@dataclass(frozen=True, slots=True)
class Leaving:
    """The sender is shutting down: its link closing next is expected, not a failure."""

    worker: int


# ----- the operations surface (admin API, /metrics, $SYS, bans): docs/pool.md -----------


@dataclass(frozen=True, slots=True)
class OpsRequest:
    """From the worker serving the admin API: answer `OpsReply(token, rows)` with this
    worker's part of `op` ("clients", "sessions", "kick", "figures", ...; `args` are its
    string arguments, the request's filters)."""

    token: int
    op: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OpsReply:
    """The answer to `OpsRequest(token)`: the sender's rows (JSON objects)."""

    token: int
    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class BanSet:
    """A ban was added on the sender (`Ban.as_dict`): every worker applies it."""

    ban: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BanLifted:
    """The ban of `kind` on `value` was lifted on the sender: every worker lifts it."""

    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class BansSnapshot:
    """After `Hello`: every ban the sender holds; the peer adds those it lacks."""

    bans: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class FlowHold:
    """Flow control across workers (docs/overload.md): stop reading from the sender's
    publisher `publisher` (a `Forward`'s), because `why` ("flow": a session here over its
    high-water mark; "blocked": this worker's memory alarm). One `FlowRelease` undoes one."""

    publisher: int
    why: str

    def __post_init__(self) -> None:
        _check_flow(self.why)


@dataclass(frozen=True, slots=True)
class FlowRelease:
    """Undo one `FlowHold` of the same publisher and reason."""

    publisher: int
    why: str

    def __post_init__(self) -> None:
        _check_flow(self.why)


def _check_flow(why: str) -> None:
    if why not in FLOW_REASONS:
        raise ValueError(f"a flow frame's reason is {why!r}, not one of {FLOW_REASONS}")


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


# ----- refused CONNECTs and the store's state, pool-wide (docs/pool.md) -------------------


@dataclass(frozen=True, slots=True)
class AuthFailed:
    """To the home of `address` (`pool.ownership.home_of` of the IP address): a CONNECT
    from it was refused on the sender; answer `AuthFailures(token, count)`."""

    token: int
    address: str


@dataclass(frozen=True, slots=True)
class AuthFailures:
    """The home's answer to `AuthFailed(token, ...)`: the address's refusals counted so far,
    this one included (the sender's CONNACK waits the delay of that count)."""

    token: int
    count: int


@dataclass(frozen=True, slots=True)
class AuthFailing:
    """From the home of `address`, to every worker: its first refusal was counted; an
    accepted CONNECT from it on any worker is told to the home (`AuthSucceeded`)."""

    address: str


@dataclass(frozen=True, slots=True)
class AuthSucceeded:
    """To the home of `address`: a CONNECT from it was accepted; its count starts over."""

    address: str


@dataclass(frozen=True, slots=True)
class StoreFailing:
    """The sender's store writer's commits fail (1) / succeed again (0); to every worker,
    and to a worker whose link comes up while they fail. While any worker's fail, every
    worker refuses durable publishes (docs/overload.md, "Store faults")."""

    failing: int


@dataclass(frozen=True, slots=True)
class ListenerCounts:
    """The sender's open connections on each listener, in configuration order: sent when
    they change (coalesced, `pool.connection_counts`) and to a worker whose link comes up.
    A worker refuses a connection when its own and the others' last counts reach the
    listener's `max_connections`."""

    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if any(count < 0 for count in self.counts):
            raise ValueError(f"negative connection counts {self.counts!r}")


@dataclass(frozen=True, slots=True)
class DurableRoutes:
    """Filters the sender now has persistent sessions' subscriptions to, and filters it no
    longer has: a publish they match needs the store (refused while it fails)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DurableSnapshot:
    """After `Hello`, beside `RoutesSnapshot`: every filter the sender has persistent
    sessions' subscriptions to, replacing what the peer knew."""

    filters: tuple[str, ...]


Frame = (
    Hello
    | RoutesChanged
    | RoutesSnapshot
    | Forward
    | Retained
    | Claim
    | Granted
    | Settled
    | Release
    | HandOver
    | HandedOver
    | Owned
    | RoutesSync
    | RoutesSynced
    | CommitSync
    | Committed
    | Leaving
    | SharesChanged
    | SharesSnapshot
    | ForwardShared
    | OpsRequest
    | OpsReply
    | BanSet
    | BanLifted
    | BansSnapshot
    | FlowHold
    | FlowRelease
    | MovingOut
    | MovedDeliveries
    | MoveRoutesKnown
    | MoveEnded
    | Connecting
    | ClaimRefused
    | AuthFailed
    | AuthFailures
    | AuthFailing
    | AuthSucceeded
    | StoreFailing
    | DurableRoutes
    | DurableSnapshot
    | ListenerCounts
    | Adopted
    | Orphans
)

# Frame kinds on the wire. New kinds get new numbers; a number is never reused.
_KINDS: dict[type[Any], int] = {
    Hello: 1,
    RoutesChanged: 2,
    RoutesSnapshot: 3,
    Forward: 4,
    Retained: 5,
    Claim: 6,
    Granted: 7,
    Release: 8,
    Settled: 9,
    HandOver: 10,
    HandedOver: 11,
    Owned: 12,
    RoutesSync: 13,
    RoutesSynced: 14,
    CommitSync: 15,
    Committed: 16,
    Leaving: 17,
    # 40-49: shared subscriptions across the pool.
    SharesChanged: 40,
    SharesSnapshot: 41,
    ForwardShared: 42,
    # 50-59: flow control across the pool.
    FlowHold: 50,
    FlowRelease: 51,
    # 60-79: the operations surface.
    OpsRequest: 60,
    OpsReply: 61,
    BanSet: 62,
    BanLifted: 63,
    BansSnapshot: 64,
    # 80-99: moving a session between workers.
    MovingOut: 80,
    MovedDeliveries: 81,
    MoveRoutesKnown: 82,
    MoveEnded: 83,
    Adopted: 84,
    Orphans: 85,
    # 100-109: flapping detection across the pool.
    Connecting: 100,
    ClaimRefused: 101,
    # 110-119: refused-CONNECT delays and the store's state across the pool.
    AuthFailed: 110,
    AuthFailures: 111,
    AuthFailing: 112,
    AuthSucceeded: 113,
    StoreFailing: 114,
    DurableRoutes: 115,
    DurableSnapshot: 116,
    # 120-129: listeners' connection counts across the pool.
    ListenerCounts: 120,
}
_CARRY_MESSAGES = (Forward, Retained, ForwardShared, Orphans)
# Frames that carry deliveries: their other fields, then the deliveries, as the last field.
_CARRY_DELIVERIES: dict[type[Any], str] = {MovingOut: "qos0", MovedDeliveries: "deliveries"}
# What each field of a control frame may hold, from its annotation: the types its JSON value
# may have and, for a tuple (a JSON list), the types of its items (None: not a tuple). A
# peer's frame with another type is refused, not carried into the broker.
_NONE = type(None)
_FIELD_SHAPES: dict[str, tuple[tuple[type, ...], tuple[type, ...] | None]] = {
    "int": ((int,), None),
    "str": ((str,), None),
    "int | None": ((int, _NONE), None),
    "str | None": ((str, _NONE), None),
    "tuple[str, ...]": ((list,), (str,)),
    "tuple[int, ...]": ((list,), (int,)),
    "dict[str, Any]": ((dict,), None),
    "tuple[dict[str, Any], ...]": ((list,), (dict,)),
}
_FIELDS = {
    cls: tuple(
        (field.name, *_FIELD_SHAPES[str(field.type)])
        for field in fields(cls)
        if field.name != _CARRY_DELIVERIES.get(cls)
    )
    for cls in _KINDS
    if cls not in _CARRY_MESSAGES
}


def _field_values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A control frame's field values in order, for its orjson body."""
    if len(names) == 1:
        get_one = attrgetter(names[0])
        return lambda frame: (get_one(frame),)
    return attrgetter(*names)


_FIELD_VALUES = {
    cls: _field_values(tuple(name for name, _types, _items in shape))
    for cls, shape in _FIELDS.items()
}


def encode_frame(frame: Frame) -> bytes:
    """The bytes of one frame."""
    cls = type(frame)
    encode = _ENCODERS.get(cls)
    body = orjson.dumps(_FIELD_VALUES[cls](frame)) if encode is None else encode(frame)
    return _FRAME_HEADER.pack(len(body), _KINDS[cls]) + body


def _encode_forward_shared(frame: ForwardShared) -> bytes:
    marks = orjson.dumps(
        [
            [mark.ordinary, [[s.group, s.topic_filter, sorted(s.tried)] for s in mark.shares]]
            for mark in frame.marks
        ]
    )
    messages = _encode_messages(frame.messages)
    return b"".join((_U32.pack(frame.publisher), _U32.pack(len(marks)), marks, messages))


def _encode_forward(frame: Forward) -> bytes:
    return _U32.pack(frame.publisher) + _encode_messages(frame.messages)


def _encode_orphans(frame: Orphans) -> bytes:
    return _U32x2.pack(frame.dead, frame.round) + _encode_messages(frame.messages)


def _encode_retained(frame: Retained) -> bytes:
    return _encode_messages(frame.messages)


def _encode_messages(messages: tuple[Message, ...]) -> bytes:
    strings: dict[str | None, int] = {None: 0}  # the frame's string table, in index order
    records: list[bytes] = []
    tail: list[bytes] = []
    pack = _MESSAGE_RECORD.pack
    for message in messages:
        props = encode_properties(message.properties) if message.properties else b""
        payload, wire = message.payload, message.wire
        records.append(
            pack(
                message.qos | _RETAIN_FLAG if message.retain else message.qos,
                message.timestamp,
                message.message_id,
                strings.setdefault(message.topic, len(strings)),
                strings.setdefault(message.publisher, len(strings)),
                strings.setdefault(message.username, len(strings)),
                len(props),
                len(payload),
                0 if wire is None else len(wire) - len(payload),
            )
        )
        tail.append(props)
        tail.append(payload if wire is None else wire)
    table = orjson.dumps(list(strings))
    return b"".join((_U32x2.pack(len(messages), len(table)), table, *records, *tail))


def _encode_deliveries(frame: Frame) -> bytes:
    """A frame's fields and one row per delivery (orjson), then the deliveries' messages."""
    deliveries: tuple[Delivery, ...] = getattr(frame, _CARRY_DELIVERIES[type(frame)])
    rows = [[d.qos, d.retain, d.subscription_ids, d.seq] for d in deliveries]
    head = orjson.dumps([*_FIELD_VALUES[type(frame)](frame), rows])
    messages = _encode_messages(tuple(delivery.message for delivery in deliveries))
    return b"".join((_U32.pack(len(head)), head, messages))


def _decode_deliveries(cls: type[Any], body: bytes) -> Frame:
    (head_size,) = _U32.unpack_from(body, 0)
    pos = _U32.size + head_size
    values = _checked_values(cls, orjson.loads(body[_U32.size : pos]), extra=1)
    messages = _decode_messages(body[pos:])
    rows = values.pop()
    if type(rows) is not list or len(rows) != len(messages):
        raise FrameError(f"a {cls.__name__} frame's delivery rows are {rows!r}")
    deliveries = tuple(
        Delivery(message, *_checked_delivery_row(row))
        for message, row in zip(messages, rows, strict=True)
    )
    named = {name: value for (name, *_shape), value in zip(_FIELDS[cls], values, strict=True)}
    return cls(**named, **{_CARRY_DELIVERIES[cls]: deliveries})  # type: ignore[no-any-return]


def _checked_delivery_row(row: Any) -> tuple[int, bool, tuple[int, ...], None, int]:
    """A delivery's row (QoS, retain, subscription ids, seq), checked; else FrameError."""
    if (
        type(row) is list
        and len(row) == 4
        and row[0] in (0, 1, 2)
        and type(row[1]) is bool
        and type(row[2]) is list
        and all(type(item) is int for item in row[2])
        and type(row[3]) is int
        and row[3] >= 0
    ):
        return row[0], row[1], tuple(row[2]), None, row[3]
    raise FrameError(f"a delivery's row is {row!r}")


def _decode_messages(body: bytes, start: int = 0) -> tuple[Message, ...]:
    """The messages of a body whose message part begins at `start`."""
    count, table_size = _U32x2.unpack_from(body, start)
    pos = start + _U32x2.size + table_size
    strings = _string_table(body[start + _U32x2.size : pos])
    records_end = pos + count * _MESSAGE_RECORD.size
    if records_end > len(body):
        raise FrameError(f"a message frame's {count} records run past its end")
    records = _MESSAGE_RECORD.iter_unpack(body[pos:records_end])
    pos = records_end
    messages: list[Message] = []
    for flags, timestamp, message_id, topic, publisher, username, props_size, size, head in records:
        if flags & ~_FLAG_BITS or flags & _QOS_BITS == _QOS_BITS or not topic:
            raise FrameError(f"a message's record has flags {flags} and topic {topic}")
        if not -_INFINITY < timestamp < _INFINITY:
            raise FrameError(f"a message's timestamp is {timestamp}")
        stop = pos + props_size
        properties = _property_block(body, pos, stop) if props_size else {}
        wire = None
        if head:  # the encoded 3.x QoS 0 PUBLISH (`Message.wire`), which ends with the payload
            wire = body[stop : stop + head + size]
            if head < _MIN_PUBLISH_HEAD or wire[0] != _PLAIN_QOS0_PUBLISH:
                raise FrameError("a message's encoded PUBLISH is not a plain QoS 0 PUBLISH")
            stop += head
        payload = body[stop : stop + size]
        if len(payload) != size:
            raise FrameError("a message's payload runs past the end of the frame")
        pos = stop + size
        messages.append(
            stored_message(
                strings[topic],
                payload,
                flags & _QOS_BITS,
                flags > _QOS_BITS,
                strings[publisher],
                strings[username],
                timestamp,
                properties,
                message_id,
                wire,
            )
        )
    if pos != len(body):
        raise FrameError(f"{len(body) - pos} bytes follow the last message of the frame")
    return tuple(messages)


def _string_table(data: bytes) -> list[str | None]:
    """A message part's string table: `None` (index 0), then strings; else FrameError."""
    strings = orjson.loads(data)
    if not (
        type(strings) is list
        and strings
        and strings[0] is None
        and all(type(string) is str for string in strings[1:])
    ):
        raise FrameError(f"a message frame's string table is {strings!r}")
    return strings


def _property_block(body: bytes, start: int, stop: int) -> dict[int, Any]:
    """A message's MQTT 5 properties, which fill `body[start:stop]`; else FrameError."""
    if stop > len(body):
        raise FrameError("a message's property block runs past the end of the frame")
    properties, end = read_properties(body, start, stop, PacketType.PUBLISH)
    if end != stop:
        raise FrameError("a message's property block does not fill its declared size")
    return properties


def _decode_marks(rows: Any) -> tuple[ShareMark, ...]:
    """The share marks of a `ForwardShared`, if every row has its shape; else FrameError."""
    if type(rows) is not list:
        raise FrameError("a ForwardShared's share marks are not a list")
    marks: list[ShareMark] = []
    for row in rows:
        if not (type(row) is list and len(row) == 2 and type(row[0]) is bool):
            raise FrameError(f"a share mark is {row!r}")
        ordinary, shares = row
        if type(shares) is not list or not all(_is_share_row(share) for share in shares):
            raise FrameError(f"a share mark's groups are {shares!r}")
        origins = tuple(ShareOrigin(group, f, frozenset(tried)) for group, f, tried in shares)
        marks.append(ShareMark(ordinary, origins))
    return tuple(marks)


def _is_share_row(share: Any) -> bool:
    return (
        type(share) is list
        and len(share) == 3
        and type(share[0]) is str
        and type(share[1]) is str
        and type(share[2]) is list
        and all(type(client_id) is str for client_id in share[2])
    )


def _decode_forward_shared(body: bytes) -> ForwardShared:
    publisher, marks_size = _U32x2.unpack_from(body, 0)
    start = _U32x2.size + marks_size
    marks = _decode_marks(orjson.loads(body[_U32x2.size : start]))
    return ForwardShared(_decode_messages(body, start), marks, publisher)


def _decode_forward(body: bytes) -> Forward:
    (publisher,) = _U32.unpack_from(body, 0)
    return Forward(_decode_messages(body, _U32.size), publisher)


def _decode_orphans(body: bytes) -> Orphans:
    dead, round_ = _U32x2.unpack_from(body, 0)
    return Orphans(_decode_messages(body, _U32x2.size), dead, round_)


def _decode_retained(body: bytes) -> Retained:
    return Retained(_decode_messages(body))


def _control_decoder(cls: type[Any]) -> Callable[[bytes], Frame]:
    def decode(body: bytes) -> Frame:
        return cls(*_checked_values(cls, orjson.loads(body)))  # type: ignore[no-any-return]

    return decode


def _decoder(cls: type[Any]) -> Callable[[bytes], Frame]:
    """How a body of `cls`'s kind is decoded."""
    special = _MESSAGE_DECODERS.get(cls)
    if special is not None:
        return special
    if cls in _CARRY_DELIVERIES:
        return lambda body: _decode_deliveries(cls, body)
    return _control_decoder(cls)


def _checked_values(cls: type[Any], values: Any, extra: int = 0) -> list[Any]:
    """A control frame's field values (lists as tuples), each of its field's type, and
    `extra` more values after them, unchecked; else FrameError."""
    shape = _FIELDS[cls]
    if type(values) is not list or len(values) != len(shape) + extra:
        raise FrameError(f"a {cls.__name__} frame holds {values!r}")
    for index, (name, types, items) in enumerate(shape):
        value = values[index]
        if type(value) not in types:
            raise FrameError(f"a {cls.__name__} frame's {name} is {value!r}")
        if items is not None:
            if not all(type(item) in items for item in value):
                raise FrameError(f"a {cls.__name__} frame's {name} is {value!r}")
            values[index] = tuple(value)
    return values


class FrameDecoder:
    """Bytes of one link in, complete frames out, in order."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """Add `data`; return the frames it completes. Raises FrameError."""
        pending = self._pending
        # Whole frames are sliced from the read itself; only a frame that spans reads is
        # put together in `pending`.
        buffer: bytes | bytearray = data
        if pending:
            pending += data
            buffer = pending
        frames: list[Frame] = []
        pos = 0
        end_of_data = len(buffer)
        while end_of_data - pos >= _FRAME_HEADER.size:
            size, kind = _FRAME_HEADER.unpack_from(buffer, pos)
            if size > MAX_FRAME:
                raise FrameError(f"frame of {size} bytes exceeds {MAX_FRAME}: broken link")
            start = pos + _FRAME_HEADER.size
            end = start + size
            if end > end_of_data:
                break
            frames.append(_decode_checked(kind, bytes(buffer[start:end])))
            pos = end
        if buffer is pending:
            del pending[:pos]
        elif pos < end_of_data:
            pending += data[pos:]
        return frames


def _decode_checked(kind: int, body: bytes) -> Frame:
    """The frame of one body, with every way bad bytes can fail turned into FrameError."""
    decode = _DECODERS.get(kind)
    if decode is None:
        raise FrameError(f"unknown frame kind {kind}")
    try:
        return decode(body)
    except FrameError:
        raise
    except (
        orjson.JSONDecodeError,
        MqttError,
        TypeError,
        ValueError,
        IndexError,
        struct.error,
    ) as error:
        raise FrameError(f"frame of kind {kind} does not parse: {error}") from error


# How each kind's body is encoded (a control frame: its field values, orjson) and decoded.
_ENCODERS: dict[type[Any], Callable[[Any], bytes]] = {
    ForwardShared: _encode_forward_shared,
    Forward: _encode_forward,
    Retained: _encode_retained,
    Orphans: _encode_orphans,
    **{cls: _encode_deliveries for cls in _CARRY_DELIVERIES},
}
_MESSAGE_DECODERS: dict[type[Any], Callable[[bytes], Frame]] = {
    ForwardShared: _decode_forward_shared,
    Forward: _decode_forward,
    Retained: _decode_retained,
    Orphans: _decode_orphans,
}
_DECODERS = {kind: _decoder(cls) for cls, kind in _KINDS.items()}
