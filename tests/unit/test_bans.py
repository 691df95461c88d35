"""The banned table and flapping detection in-process (core/bans.py), with hypothesis for the
address matching."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.bans import (
    Ban,
    BanError,
    BanKind,
    BanTable,
    FlappingDetector,
    ban_from_dict,
    peer_ip,
)

NOW = 1_000_000.0


def ban(kind: BanKind, value: str, until: float | None = None) -> Ban:
    return ban_from_dict({"kind": kind.value, "value": value, "until": until, "created_at": NOW})


def test_client_id_ban_matches_only_that_client_id() -> None:
    table = BanTable()
    table.add(ban(BanKind.CLIENT_ID, "bad"))
    assert table.match("bad", None, "10.0.0.1:1", NOW) is not None
    assert table.match("good", None, "10.0.0.1:1", NOW) is None


def test_username_ban_ignores_clients_without_a_username() -> None:
    table = BanTable()
    table.add(ban(BanKind.USERNAME, "mallory"))
    assert table.match("x", "mallory", "10.0.0.1:1", NOW) is not None
    assert table.match("x", None, "10.0.0.1:1", NOW) is None
    assert table.match("x", "alice", "10.0.0.1:1", NOW) is None


@pytest.mark.parametrize(
    ("network", "peer", "matched"),
    [
        ("10.0.0.0/8", "10.9.8.7:1883", True),
        ("10.0.0.0/8", "11.0.0.1:1883", False),
        ("192.0.2.7", "192.0.2.7:40000", True),
        ("192.0.2.7", "192.0.2.8:40000", False),
        ("2001:db8::/32", "[2001:db8::1]:5000", True),
        ("2001:db8::/32", "2001:db8::1:5000", True),  # how the broker writes IPv6 peers
        ("::1", "127.0.0.1:5000", False),
        ("10.0.0.0/8", "unix:7", False),
    ],
)
def test_peer_bans_match_addresses_and_cidr_blocks(network: str, peer: str, matched: bool) -> None:
    table = BanTable()
    table.add(ban(BanKind.PEER, network))
    assert (table.match("x", None, peer, NOW) is not None) is matched


@given(
    st.ip_addresses(v=4),
    st.integers(min_value=0, max_value=32),
    st.ip_addresses(v=4),
)
def test_cidr_matching_agrees_with_ipaddress(
    base: ipaddress.IPv4Address, prefix: int, candidate: ipaddress.IPv4Address
) -> None:
    network = ipaddress.ip_network(f"{base}/{prefix}", strict=False)
    table = BanTable()
    table.add(ban(BanKind.PEER, str(network)))
    assert (table.match("x", None, f"{candidate}:1", NOW) is not None) is (candidate in network)


def test_a_ban_expires_and_is_dropped() -> None:
    table = BanTable()
    table.add(ban(BanKind.CLIENT_ID, "c", until=NOW + 10))
    assert table.match("c", None, "1.2.3.4:1", NOW + 9.9) is not None
    assert table.match("c", None, "1.2.3.4:1", NOW + 10) is None
    assert len(table) == 0
    table.add(ban(BanKind.CLIENT_ID, "d", until=NOW + 1))
    assert table.bans(NOW + 2) == []


def test_remove_and_replace() -> None:
    table = BanTable()
    table.add(ban(BanKind.PEER, "10.0.0.0/8", until=NOW + 5))
    table.add(ban(BanKind.PEER, "10.1.2.3/8", until=NOW + 50))  # normalised: the same block
    assert [b.until for b in table.bans(NOW)] == [NOW + 50]
    assert table.remove(BanKind.PEER, "10.0.0.0/8")
    assert not table.remove(BanKind.PEER, "10.0.0.0/8")
    assert table.match("x", None, "10.0.0.1:1", NOW) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "planet", "value": "x"},
        {"kind": "clientid", "value": ""},
        {"kind": "clientid"},
        {"kind": "peerhost", "value": "999.1.1.1"},
        {"kind": "clientid", "value": "x", "until": "tomorrow"},
    ],
)
def test_malformed_bans_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(BanError):
        ban_from_dict(bad)


def test_bans_round_trip_through_dicts() -> None:
    original = Ban(BanKind.PEER, "192.0.2.0/24", NOW + 1, "why", NOW)
    assert ban_from_dict(original.as_dict()) == original


def test_peer_ip() -> None:
    assert str(peer_ip("127.0.0.1:1883")) == "127.0.0.1"
    assert str(peer_ip("::1:1883")) == "::1"
    assert peer_ip("unix:5") is None


def test_flapping_fires_on_the_nth_connect_within_the_window() -> None:
    detector = FlappingDetector(max_connects=3, window=10)
    assert not detector.connect("c", NOW)
    assert not detector.connect("c", NOW + 1)
    assert not detector.connect("other", NOW + 2)
    assert detector.connect("c", NOW + 2)  # third of "c" within 10 s
    assert not detector.connect("c", NOW + 3)  # counting starts again


def test_flapping_window_slides() -> None:
    detector = FlappingDetector(max_connects=3, window=10)
    assert not detector.connect("c", NOW)
    assert not detector.connect("c", NOW + 6)
    assert not detector.connect("c", NOW + 12)  # the first left the window
    assert detector.connect("c", NOW + 13)


def test_flapping_off_and_idle_histories_forgotten() -> None:
    assert not any(FlappingDetector(0, 10).connect("c", NOW) for _ in range(100))
    detector = FlappingDetector(max_connects=5, window=10)
    detector.connect("old", NOW)
    detector.connect("new", NOW + 15)
    detector.forget_idle(NOW + 15)
    assert list(detector._connects) == ["new"]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 5)), max_size=60), st.integers(1, 5))
def test_flapping_matches_a_plain_sliding_window(
    steps: list[tuple[str, float]], max_connects: int
) -> None:
    """The compact history (a float, then a deque) answers as a list of every CONNECT would."""
    detector = FlappingDetector(max_connects=max_connects, window=10)
    reference: dict[str, list[float]] = {}
    now = NOW
    for client_id, gap in steps:
        now += gap
        times = [t for t in reference.get(client_id, []) if t > now - 10] + [now]
        fired = len(times) >= max_connects
        reference[client_id] = [] if fired else times
        assert detector.connect(client_id, now) is fired
