"""Persistent sessions expire `limits.session_expiry` after their client left."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mqtt.packets import Disconnect
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, subscribe_raw, unique

EXPIRY_CONFIG = """
[limits]
session_expiry = 1.0
"""


def _leave_persistent_session(broker: BrokerProcess, client_id: str) -> None:
    client = connect_raw(broker, client_id, clean=False, session_present=False)
    subscribe_raw(client, 1, ("expiry/#", 1))
    client.send(Disconnect())
    client.close()


def test_session_is_kept_within_expiry_and_removed_after_it(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(EXPIRY_CONFIG)
    kept, dropped = unique("kept"), unique("dropped")
    _leave_persistent_session(broker, kept)
    _leave_persistent_session(broker, dropped)
    connect_raw(broker, kept, clean=False, session_present=True).close()  # back in time
    time.sleep(1.6)
    connect_raw(broker, dropped, clean=False, session_present=False).close()
    assert f"session '{dropped}' expired" in broker.log()


def test_session_expired_while_the_broker_was_down_is_removed_at_start(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    data_dir = str(tmp_path / "data")
    broker = broker_factory(EXPIRY_CONFIG, "--data-dir", data_dir)
    client_id = unique("sleeper")
    _leave_persistent_session(broker, client_id)
    assert broker.stop() == 0
    time.sleep(1.2)
    broker = broker_factory(EXPIRY_CONFIG, "--data-dir", data_dir)
    assert "removed 1 expired sessions" in broker.log()
    connect_raw(broker, client_id, clean=False, session_present=False).close()
