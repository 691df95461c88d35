"""The keys of the cluster's bans bucket (cluster.bans): every ban's key is one NATS KV
allows, and names its kind and value back, a peer address as its normalised network."""

from __future__ import annotations

import re

import pytest

from cluster.bans import ban_key, ban_of_key
from core.bans import BanKind

KV_KEY = re.compile(r"[-/_=.a-zA-Z0-9]+")  # nats-py's `_is_key_valid`, less the dots' rule


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (BanKind.CLIENT_ID, "sensor-1"),
        (BanKind.CLIENT_ID, "a.b/c d*>#+ é\u2603"),
        (BanKind.USERNAME, "."),
        (BanKind.PEER, "10.0.0.0/8"),
        (BanKind.PEER, "2001:db8::/32"),
    ],
)
def test_a_key_is_valid_and_names_its_ban_back(kind: BanKind, value: str) -> None:
    key = ban_key(kind, value)
    assert KV_KEY.fullmatch(key) and not key.startswith(".") and not key.endswith(".")
    assert ban_of_key(key) == (kind, value)


def test_a_peer_address_is_keyed_as_its_network() -> None:
    assert ban_key(BanKind.PEER, "192.0.2.7") == ban_key(BanKind.PEER, "192.0.2.7/32")
    assert ban_of_key(ban_key(BanKind.PEER, "192.0.2.7")) == (BanKind.PEER, "192.0.2.7/32")


@pytest.mark.parametrize("key", ["planet.eA==", "clientid.%%%", "clientid.gA=="])
def test_a_key_of_no_ban_is_a_value_error(key: str) -> None:
    with pytest.raises(ValueError):
        ban_of_key(key)
