"""The `[cluster]` table: what it accepts and how it says what is wrong (cluster.config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.config import ConfigError, load_config
from cluster.config import ClusterConfig, ClusterConfigError, parse_cluster

BASE = {"name": "plant-7", "node": "edge-a", "nats": ["nats://10.0.0.5:4222"]}


def test_a_minimal_table_gives_the_defaults() -> None:
    config = parse_cluster(BASE, Path("/etc/mqtt"))
    assert config == ClusterConfig(name="plant-7", node="edge-a", nats=("nats://10.0.0.5:4222",))
    assert (config.heartbeat, config.peer_timeout) == (1.0, 5.0)
    assert config.down_queue == 10_000
    assert parse_cluster({**BASE, "down_queue": 0}, Path()).down_queue == 0
    assert not config.uses_tls


def test_files_are_relative_to_the_configuration_and_tls_urls_turn_tls_on() -> None:
    config = parse_cluster(
        {**BASE, "nats": "tls://n1:4222", "cafile": "ca.pem", "credentials": "a.creds"},
        Path("/etc/mqtt"),
    )
    assert config.nats == ("tls://n1:4222",)
    assert (config.cafile, config.credentials) == ("/etc/mqtt/ca.pem", "/etc/mqtt/a.creds")
    assert config.uses_tls


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"node": "edge.a"}, "node must be 1 to 64 letters"),  # a dot would split the subject
        ({"name": ""}, "name must be 1 to 64 letters"),
        ({"nats": []}, "nats must list NATS servers"),
        ({"nats": ["10.0.0.5:4222"]}, "nats must list NATS servers"),
        ({"heartbeat": 0}, "heartbeat must be a positive number"),
        ({"heartbeat": 3.0}, "peer_timeout must be at least twice heartbeat"),
        ({"user": "u"}, "user and password go together"),
        ({"keyfile": "k.pem"}, "keyfile needs certfile"),
        ({"down_queue": -1}, "down_queue must be a whole number, 0 or more"),
        ({"down_queue": 1.5}, "down_queue must be a whole number, 0 or more"),
        ({"nodes": 3}, "unknown keys ['nodes']"),
    ],
)
def test_a_wrong_table_is_refused_naming_the_key(change: dict[str, object], says: str) -> None:
    with pytest.raises(ClusterConfigError, match=r".*" + says.replace("[", r"\[")):
        parse_cluster({**BASE, **change}, Path())


def test_the_broker_configuration_reads_the_cluster_table(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('[cluster]\nname = "p"\nnode = "n1"\nnats = ["nats://127.0.0.1:4222"]\n')
    config = load_config(path)
    assert config.cluster is not None and config.cluster.node == "n1"
    assert config.node_name == "n1"  # events, $SYS and logs carry the node's name
    path.write_text(
        'node_name = "edge-1@10.0.0.5"\n[cluster]\nname = "p"\nnode = "n1"\n'
        'nats = ["nats://127.0.0.1:4222"]\n'
    )
    assert load_config(path).node_name == "edge-1@10.0.0.5"  # given: kept
    assert load_config(None).cluster is None  # without it: one machine, no NATS
    path.write_text('[cluster]\nname = "p"\nnode = "n1"\nnats = "localhost"\n')
    with pytest.raises(ConfigError, match="nats must list NATS servers"):
        load_config(path)
