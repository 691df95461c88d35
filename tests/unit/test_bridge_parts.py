"""The pure parts of bridges: configuration, topic mapping, back-off, relay, placement, and
the codec's bridge bit (Mosquitto's `try_private`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backoff import Backoff
from bridge.config import (
    QOS2_WINDOW,
    WIDE_WINDOW,
    BridgeConfigError,
    TopicConfig,
    parse_bridges,
)
from bridge.frames import RawPublish, is_plain_ack, split
from bridge.placement import bridge_nodes, runner_node, runner_of
from bridge.relay import Relay, RemoteLimits
from bridge.runner import session_window
from bridge.topics import CACHED, Subscription, TopicMap
from core.client import ClientInfo
from mqtt.decoder import PacketDecoder
from mqtt.encoder import encode
from mqtt.errors import UnsupportedProtocolVersionError
from mqtt.packets import Connect, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt.properties import PropertyId


def _map(*lines: TopicConfig) -> TopicMap:
    return TopicMap(lines)


def test_prefixes_are_swapped_as_in_mosquitto() -> None:
    topics = _map(
        TopicConfig("up/#", "out", 1, "site7/", "plant/"),
        TopicConfig("cmd/+", "in", 2, "site7/", "plant/"),
        TopicConfig("", "out", 0, "a/b", "c/d"),
    )
    assert topics.local_subscriptions() == [Subscription("site7/up/#", 1), Subscription("a/b", 0)]
    assert topics.remote_subscriptions() == [Subscription("plant/cmd/+", 2)]
    assert topics.to_remote("site7/up/x/y") == "plant/up/x/y"
    assert topics.to_remote("a/b") == "c/d"
    assert topics.to_remote("site7/cmd/x") is None  # an "in" line does not send out
    assert topics.to_remote("site7") is None  # matched by site7/up/#? no: not under the prefix
    assert topics.to_local("plant/cmd/reboot") == "site7/cmd/reboot"
    assert topics.to_local("plant/cmd/a/b") is None


def test_both_direction_and_shared_filters() -> None:
    topics = _map(TopicConfig("t/#", "both", 1), TopicConfig("t/#", "out", 2))
    assert topics.local_subscriptions() == [Subscription("t/#", 2)]  # one, at the highest QoS
    assert topics.remote_subscriptions() == [Subscription("t/#", 1)]
    assert topics.to_local("t/x") == "t/x"


def test_renames_are_remembered_and_stay_right_past_the_bound() -> None:
    topics = _map(TopicConfig("up/#", "both", 1, "l/", "r/"))
    for round_ in range(2):  # the second round answers from what the first remembered
        for index in range(CACHED + 10):  # past the bound: forgotten, then learnt again
            assert topics.to_remote(f"l/up/{index}") == f"r/up/{index}", round_
            assert topics.to_local(f"r/up/{index}") == f"l/up/{index}", round_
        assert topics.to_remote("l/down") is None and topics.to_remote("l/down") is None


levels = st.text(alphabet="abc", min_size=1, max_size=3)


@given(st.lists(levels, min_size=1, max_size=4), levels, levels)
def test_a_topic_crosses_and_comes_back_unchanged(path: list[str], local: str, remote: str) -> None:
    topics = _map(TopicConfig("#", "both", 1, f"{local}/", f"{remote}/"))
    name = f"{local}/" + "/".join(path)
    there = topics.to_remote(name)
    assert there == f"{remote}/" + "/".join(path)
    assert topics.to_local(there) == name


def test_backoff_tries_every_address_then_waits_doubling_up_to_the_cap() -> None:
    backoff = Backoff(("a:1", "b:2"), first=1.0, cap=5.0, rng=lambda: 1.0)  # no jitter
    waits = []
    for _ in range(5):
        assert backoff.address == "a:1"
        assert backoff.failed() == 0.0
        assert backoff.address == "b:2"
        waits.append(backoff.failed())
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.connected()
    assert backoff.lost() == 1.0
    assert backoff.address == "a:1"
    assert backoff.failed() == 0.0  # a new schedule: the first round waits nothing within it


def test_backoff_after_a_lost_connection_goes_back_to_the_first_address() -> None:
    backoff = Backoff(("a:1", "b:2", "c:3"), first=1.0, cap=5.0, rng=lambda: 1.0)
    assert backoff.failed() == 0.0
    assert (backoff.address, backoff.at_first) == ("b:2", False)
    backoff.connected()
    assert not backoff.at_first  # connected to the second address
    assert backoff.lost() == 1.0
    assert (backoff.address, backoff.at_first) == ("a:1", True)


def test_backoff_round_robin_goes_on_to_the_next_address_and_waits_after_a_whole_round() -> None:
    backoff = Backoff(("a:1", "b:2", "c:3"), first=1.0, cap=5.0, rng=lambda: 1.0, round_robin=True)
    assert backoff.failed() == 0.0
    backoff.connected()  # to b:2
    assert backoff.lost() == 1.0
    assert backoff.address == "c:3"
    assert backoff.failed() == 0.0  # c:3, then a:1 within the round that began at c:3
    assert backoff.address == "a:1"
    assert backoff.failed() == 0.0
    assert backoff.address == "b:2"
    assert backoff.failed() == 1.0  # all three refused: the round's wait
    assert backoff.address == "c:3"


def test_backoff_jitter_is_between_half_and_the_whole_wait() -> None:
    low = Backoff(("a:1",), 4.0, 60.0, rng=lambda: 0.0)
    assert low.failed() == 2.0


publishes = st.builds(
    Publish,
    topic=st.sampled_from(["l/up/a", "l/up/" + "b" * 300, "l/other", "x/up/a"]),
    payload=st.sampled_from([b"", b"p", b"q" * 200, b"r" * 20000]),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    dup=st.booleans(),
    packet_id=st.integers(1, 65535),
    properties=st.sampled_from(
        [
            {},
            {PropertyId.MESSAGE_EXPIRY_INTERVAL: 60, PropertyId.CONTENT_TYPE: "t"},
            {PropertyId.USER_PROPERTY: [("k", "v" * 150)], PropertyId.SUBSCRIPTION_IDENTIFIER: [3]},
        ]
    ),
)


@given(st.lists(publishes, min_size=1, max_size=6), st.integers(1, 97))
def test_publishes_passed_on_as_bytes_are_what_decoding_and_encoding_make(
    packets: list[Publish], chunk: int
) -> None:
    """Toward a 3.1.1 remote the local session's PUBLISHes go out from their bytes
    (`bridge.frames`): the same bytes and acknowledgements as the decoded path, however the
    stream is cut."""
    packets = [
        p if p.qos else Publish(p.topic, p.payload, 0, p.retain, p.dup, None, p.properties)
        for p in packets
    ]
    wire = b"".join(encode(p, 5) for p in packets) + encode(PubRel(7), 5)
    lines = _map(TopicConfig("up/#", "out", 2, "l/", "r/"))
    decoded = Relay(lines, remote_version=4).from_local(
        PacketDecoder(1 << 20, protocol_version=5).feed(wire)
    )
    items: list[RawPublish | PubRel] = []
    unread = b""
    for start in range(0, len(wire), chunk):  # as the reads of a socket would cut it
        buf = unread + wire[start : start + chunk]
        frames, end = split(buf, 1 << 20)
        unread = buf[end:]
        for frame in frames:
            if isinstance(frame, bytes):
                (other,) = PacketDecoder(1 << 20, protocol_version=5).feed(frame)
                assert isinstance(other, PubRel)
                items.append(other)
            else:
                items.append(frame)
    assert unread == b""
    raw = Relay(lines, remote_version=4).from_local(list(items))
    assert [p if isinstance(p, bytes) else encode(p, 4) for p in raw.to_remote] == [
        encode(p, 4) for p in decoded.to_remote if not isinstance(p, bytes)
    ]
    assert any(isinstance(p, bytes) for p in raw.to_remote) == any(
        p.topic.startswith("l/up/") for p in packets
    )
    assert raw.to_local == decoded.to_local


def test_relay_passes_each_qos_flow_with_the_same_packet_ids() -> None:
    relay = Relay(_map(TopicConfig("up/#", "out", 2, "l/", "r/")), remote_version=4)
    out = relay.from_local(
        [
            Publish("l/up/a", b"x", 2, True, True, 7, {PropertyId.SUBSCRIPTION_IDENTIFIER: [1]}),
            PubRel(7),
        ]
    )
    assert out.to_remote == [Publish("r/up/a", b"x", 2, True, True, 7), PubRel(7)]
    back = relay.from_remote([PubRec(7), PubComp(7)])
    assert back.to_local == [PubRec(7), PubComp(7)]
    assert relay.counts.sent == 1


def test_the_outgoing_only_lines_are_unsubscribed_at_the_remote_unless_one_comes_in() -> None:
    lines = _map(
        TopicConfig("a/#", "out", 1, "", "r/"),
        TopicConfig("a/#", "out", 2, "", "r/"),  # the same remote filter once
        TopicConfig("b/#", "out", 1),
        TopicConfig("b/#", "in", 1),  # subscribed: not unsubscribed
        TopicConfig("c/#", "both", 1),
    )
    assert lines.remote_unsubscriptions() == ["r/a/#"]


def test_relay_bounds_what_goes_out_by_what_the_remote_takes() -> None:
    # The bridge's bound and a 5.0 remote's Maximum Packet Size: the smaller counts.
    limits = RemoteLimits.of(0, True, {PropertyId.MAXIMUM_PACKET_SIZE: 60})
    assert limits == RemoteLimits(60, True)
    assert RemoteLimits.of(40, True, {PropertyId.MAXIMUM_PACKET_SIZE: 60}).max_packet_size == 40
    assert RemoteLimits.of(0, True, {}) == RemoteLimits(0, True)  # no bound at all
    # Retain Available 0 [MQTT-3.2.2-14], or outgoing_retain = false, clears the flag.
    assert not RemoteLimits.of(0, True, {PropertyId.RETAIN_AVAILABLE: 0}).retain
    assert not RemoteLimits.of(0, False, {}).retain
    for version in (4, 5):
        relay = Relay(_map(TopicConfig("#", "out", 2)), version, limits=limits)
        small = Publish("t", b"x" * 10, 1, True, False, 1)
        large = Publish("t", b"x" * 100, 1, True, False, 2)
        large2 = Publish("t", b"x" * 100, 2, False, False, 3)
        sent = [small, large, large2]
        out = relay.from_local(_as_read(sent, version))
        # Too large [MQTT-3.2.2-15]: acknowledged here as if sent [MQTT-3.1.2-25].
        assert out.to_local == [PubAck(2), PubRec(3)]
        assert relay.from_local([PubRel(3)]).to_local == [PubComp(3)]
        assert [_decoded(p, version) for p in out.to_remote] == [small]
        assert (relay.counts.sent, relay.counts.too_large) == (1, 2)
    cleared = Relay(_map(TopicConfig("#", "out", 1)), 4, limits=RemoteLimits(0, False))
    (frame,) = cleared.from_local(_as_read([Publish("t", b"r", 1, True, False, 4)], 4)).to_remote
    assert _decoded(frame, 4) == Publish("t", b"r", 1, False, False, 4)


def _as_read(packets: list[Publish], remote_version: int) -> list[RawPublish | Publish]:
    """What the local link of a bridge to a `remote_version` remote reads of `packets`."""
    if remote_version >= 5:
        return list(packets)
    frames, _end = split(b"".join(encode(p, 5) for p in packets), 1 << 20)
    return [f for f in frames if isinstance(f, RawPublish)]


def _decoded(packet: object, version: int) -> object:
    if isinstance(packet, bytes):
        (packet,) = PacketDecoder(1 << 20, protocol_version=version).feed(packet)
    return packet


def test_relay_sends_no_more_than_a_5_remotes_maximum_qos() -> None:
    assert RemoteLimits.of(0, True, {PropertyId.MAXIMUM_QOS: 1}).max_qos == 1
    lines = _map(TopicConfig("#", "out", 2))
    # Maximum QoS 1 [MQTT-3.2.2-11]: QoS 2 goes at QoS 1, its PUBACK is the local PUBREC.
    relay = Relay(lines, 5, limits=RemoteLimits(max_qos=1))
    out = relay.from_local(
        [Publish("t", b"2", 2, False, False, 7), Publish("t", b"1", 1, packet_id=8)]
    )
    assert out.to_remote == [Publish("t", b"2", 1, packet_id=7), Publish("t", b"1", 1, packet_id=8)]
    assert out.to_local == []
    back = relay.from_remote([PubAck(7), PubAck(8)])
    assert back.to_local == [PubRec(7), PubAck(8)]
    released = relay.from_local([PubRel(7)])
    assert released.to_local == [PubComp(7)] and released.to_remote == []  # ends here
    # Maximum QoS 0: nothing comes back, the local flows end at once.
    relay = Relay(lines, 5, limits=RemoteLimits(max_qos=0))
    out = relay.from_local(
        [Publish("t", b"2", 2, False, False, 9), Publish("t", b"1", 1, packet_id=10)]
    )
    assert out.to_remote == [Publish("t", b"2", 0), Publish("t", b"1", 0)]
    assert out.to_local == [PubRec(9), PubAck(10)]
    assert relay.from_local([PubRel(9)]).to_local == [PubComp(9)]


def test_relay_acknowledges_what_no_line_maps() -> None:
    relay = Relay(_map(TopicConfig("up/#", "out", 2)), remote_version=5)
    unmapped = [Publish("other", b"", 1, packet_id=3), Publish("x", b"", 2, packet_id=4)]
    out = relay.from_local(unmapped)
    assert out.to_local == [PubAck(3), PubRec(4)] and out.to_remote == []
    assert relay.from_local([PubRel(4)]).to_local == [PubComp(4)]  # that flow ends here
    incoming = relay.from_remote([Publish("nowhere", b"", 1, packet_id=9)])
    assert incoming.to_remote == [PubAck(9)] and incoming.to_local == []
    assert relay.counts.unmapped == 3


def test_a_refused_pubrec_from_a_5_remote_ends_the_local_flow() -> None:
    relay = Relay(_map(TopicConfig("#", "out", 2)), remote_version=5)
    assert relay.from_remote([PubRec(5, 0x87)]).to_local == [PubRec(5, 0x87)]
    released = relay.from_local([PubRel(5)])
    assert released.to_local == [PubComp(5)] and released.to_remote == []


def test_reason_codes_do_not_reach_a_3_remote() -> None:
    relay = Relay(_map(TopicConfig("#", "in", 1)), remote_version=4)
    assert relay.from_local([PubAck(2, 0x10)]).to_remote == [PubAck(2)]


def test_each_bridge_has_one_runner_and_the_next_live_worker_takes_over() -> None:
    home = runner_of("cloud", 3, {0, 1, 2})
    assert home is not None
    assert runner_of("cloud", 3, {0, 1, 2} - {home}) == (home + 1) % 3
    assert runner_of("cloud", 3, {(home + 2) % 3}) == (home + 2) % 3
    assert runner_of("cloud", 3, set()) is None


@given(
    st.text(min_size=1, max_size=12),
    st.sets(st.text(min_size=1, max_size=8), min_size=2, max_size=6),
)
def test_a_bridge_runs_on_one_node_that_only_its_own_going_moves(
    name: str, nodes: set[str]
) -> None:
    """Every node computes the same runner from the same live nodes; a node that is not
    the runner coming or going leaves the bridge where it is, and the runner going hands
    it to one of the others."""
    runner = runner_node(name, nodes)
    assert runner in nodes
    assert runner_node(name, sorted(nodes, reverse=True)) == runner  # order does not matter
    other = next(node for node in sorted(nodes) if node != runner)
    assert runner_node(name, nodes - {other}) == runner
    assert runner_node(name, nodes | {other + "-new"}) in {runner, other + "-new"}
    assert runner_node(name, nodes - {runner}) in nodes - {runner}
    assert runner_node(name, set()) is None


def test_a_bridge_is_placed_among_the_nodes_that_have_it() -> None:
    nodes = {"a": {"cloud", "m"}, "b": {"m"}, "c": set()}
    assert bridge_nodes("m", nodes) == ["a", "b"]
    assert bridge_nodes("cloud", nodes) == ["a"]
    assert bridge_nodes("other", nodes) == []


def _bridges(text: str) -> object:
    import tomllib  # noqa: PLC0415

    return parse_bridges(tomllib.loads(text)["bridges"], Path("/etc/broker"))


def test_configuration_reads_a_bridge_and_resolves_files() -> None:
    (bridge,) = _bridges(  # type: ignore[misc]
        '[[bridges]]\nname = "cloud"\naddresses = ["h:8883"]\ncafile = "ca.pem"\n'
        '[[bridges.topics]]\npattern = "t/#"\ndirection = "both"\nqos = 1\n'
    )
    assert bridge.cafile == "/etc/broker/ca.pem" and bridge.uses_tls and bridge.version == 4
    (bridge,) = _bridges(  # type: ignore[misc]
        '[[bridges]]\nname = "cloud"\naddresses = ["h:8883"]\ncapath = "certs"\n'
        '[[bridges.topics]]\npattern = "t/#"\n'
    )
    assert bridge.capath == "/etc/broker/certs" and bridge.uses_tls  # a capath turns TLS on


def test_the_state_topic_is_named_after_the_bridge_here_and_its_client_id_at_the_remote() -> None:
    head = '[[bridges]]\nname = "cloud"\naddresses = ["h:1"]\n'
    topics = '[[bridges.topics]]\npattern = "t"\n'
    (bridge,) = _bridges(head + topics)  # type: ignore[misc]
    assert bridge.notifications and not bridge.notifications_local_only
    assert bridge.state_topic("") == "$SYS/broker/connection/cloud/state"
    assert bridge.state_topic("edge-7.cloud") == "$SYS/broker/connection/edge-7.cloud/state"
    (bridge,) = _bridges(head + 'notification_topic = "sites/7/bridge"\n' + topics)  # type: ignore[misc]
    assert bridge.state_topic("") == bridge.state_topic("edge-7.cloud") == "sites/7/bridge"


@pytest.mark.parametrize(
    ("lines", "window"),
    [
        ([("out", 1), ("in", 2)], WIDE_WINDOW),  # no QoS 2 goes out
        ([("out", 1), ("out", 2)], QOS2_WINDOW),  # a Mosquitto remote's quota for QoS 2
        ([("both", 2)], QOS2_WINDOW),
    ],
)
def test_the_default_window_is_narrow_only_with_an_outgoing_qos_2_line(
    lines: list[tuple[str, int]], window: int
) -> None:
    topics = "".join(
        f'[[bridges.topics]]\npattern = "t{n}/#"\ndirection = "{d}"\nqos = {q}\n'
        for n, (d, q) in enumerate(lines)
    )
    head = '[[bridges]]\nname = "a"\naddresses = ["h:1"]\n'
    (bridge,) = _bridges(head + topics)  # type: ignore[misc]
    assert bridge.max_inflight == window
    (bridge,) = _bridges(head + "max_inflight = 7\n" + topics)  # type: ignore[misc]
    assert bridge.max_inflight == 7  # as configured


def test_the_window_is_the_bridges_own_lowered_to_a_5_remotes_receive_maximum() -> None:
    assert session_window(256, {}) == 256  # 3.1.1, or a 5.0 remote without a maximum
    assert session_window(256, {PropertyId.RECEIVE_MAXIMUM: 20}) == 20
    assert session_window(10, {PropertyId.RECEIVE_MAXIMUM: 20}) == 10
    # The local session's window is its Receive Maximum, not [limits] max_inflight's bound.
    bridge = ClientInfo(
        client_id="$bridge/a",
        username=None,
        peer="bridge:a",
        protocol_version=5,
        clean_start=False,
        keepalive=0,
        receive_maximum=256,
    )
    other = ClientInfo(
        client_id="a",
        username=None,
        peer="h:1",
        protocol_version=5,
        clean_start=False,
        keepalive=0,
        receive_maximum=256,
    )
    assert bridge.inflight_bound(32) == 65535 and other.inflight_bound(32) == 32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "a b"\naddresses = ["h:1"]', "name must be"),
        ('name = "a"', "addresses is required"),
        ('name = "a"\naddresses = ["h"]', "must be host:port"),
        ('name = "a"\naddresses = ["h:1"]\nfoo = 1', "unknown key 'foo'"),
        ('name = "a"\naddresses = ["h:1"]\nprotocol_version = "4"', "protocol_version"),
        ('name = "a"\naddresses = ["h:1"]\nnotification_topic = "s/+"', "notification_topic"),
        ('name = "a"\naddresses = ["h:1"]\nnotifications = "yes"', "notifications must be bool"),
        ('name = "a"\naddresses = ["h:1"]\nbind_address = "eth0"', "bind_address must be an IP"),
        ('name = "a"\naddresses = ["h:1"]\nstart_type = "never"', "start_type must be one of"),
        ('name = "a"\naddresses = ["h:1"]\nthreshold = 0', "threshold must be 1 or more"),
        ('name = "a"\naddresses = ["h:1"]\nmax_packet_size = -1', "max_packet_size must be"),
        ('name = "a"\naddresses = ["h:1"]\ntls_version = "tlsv1.2"', "need tls = true"),
        ('name = "a"\naddresses = ["h:1"]\ntls = true\ntls_version = "tlsv1.1"', "RFC 8996"),
    ],
)
def test_configuration_errors_name_the_key(text: str, message: str) -> None:
    topics = '\n[[bridges.topics]]\npattern = "t"\n'
    with pytest.raises(BridgeConfigError, match=message):
        _bridges("[[bridges]]\n" + text + topics)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('pattern = "t"\ndirection = "up"', "direction must be"),
        ('pattern = "t"\nqos = 3', "qos must be"),
        ('pattern = "t"\nlocal_prefix = "a/+/"', "must not hold a wildcard"),
        ('pattern = ""\nlocal_prefix = "a"', "empty pattern"),
        ('pattern = "a/#/b"', "not a valid topic filter"),
    ],
)
def test_topic_line_errors(line: str, message: str) -> None:
    with pytest.raises(BridgeConfigError, match=message):
        _bridges('[[bridges]]\nname = "a"\naddresses = ["h:1"]\n[[bridges.topics]]\n' + line)


@pytest.mark.parametrize("version", [3, 4])
def test_the_bridge_bit_round_trips_in_3x(version: int) -> None:
    name = "MQIsdp" if version == 3 else "MQTT"
    data = encode(Connect("b", protocol_version=version, protocol_name=name, bridge=True))
    assert data[2 + 2 + len(name)] == 0x80 | version
    decoder = PacketDecoder(from_client=True)
    (connect,) = decoder.feed(data)
    assert isinstance(connect, Connect)
    assert (connect.bridge, connect.protocol_version, decoder.protocol_version) == (
        True,
        version,
        version,
    )


def test_the_bridge_bit_is_not_a_5_0_level() -> None:
    data = bytearray(encode(Connect("b", protocol_version=5)))
    data[2 + 2 + 4] = 0x85
    with pytest.raises(UnsupportedProtocolVersionError):
        PacketDecoder(from_client=True).feed(bytes(data))


@given(st.sampled_from([PubAck, PubRec, PubRel, PubComp]), st.integers(1, 0xFFFF))
def test_a_3_1_1_remotes_plain_acknowledgements_pass_to_the_local_session_as_they_came(
    kind: type[PubAck | PubRec | PubRel | PubComp], packet_id: int
) -> None:
    """The bytes a 3.1.1 remote sends are the bytes the relay would encode for the 5.0 local
    session from the decoded packet."""
    frame = encode(kind(packet_id), 4)
    assert is_plain_ack(frame)
    (decoded,) = PacketDecoder(1 << 20, protocol_version=4).feed(frame)
    relay = Relay(_map(TopicConfig("#", "both", 2)), remote_version=4)
    expected = relay.from_remote([decoded]).to_local
    assert [encode(p, 5) for p in expected if not isinstance(p, bytes)] == [frame]
    assert relay.from_remote([frame]).to_local == [frame]


def test_other_frames_from_the_remote_are_left_to_the_decoder() -> None:
    publish = encode(Publish("r/up", b"x", 1, packet_id=3), 4)
    wire = publish + b"\x40\x02\x00\x05" + b"\x60\x02\x00\x06" + b"\xd0\x00" + b"\x40\x02"
    frames, end = split(wire, 1 << 20, publishes=False)
    assert frames == [publish, b"\x40\x02\x00\x05", b"\x60\x02\x00\x06", b"\xd0\x00"]
    assert wire[end:] == b"\x40\x02"  # unfinished
    # a PUBREL with the wrong flags, a PINGRESP, a PUBLISH: not passed on as they came
    assert [is_plain_ack(frame) for frame in frames] == [False, True, False, False]
    assert not is_plain_ack(encode(PubAck(5, 0x10, {}), 5))  # a reason code: 5.0 only
