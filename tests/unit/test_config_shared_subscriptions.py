"""The `[shared_subscriptions]` table: defaults, every strategy, and errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.config import ConfigError, load_config
from router.share_strategy import STRATEGY_NAMES


def test_defaults_are_on_and_round_robin() -> None:
    shared = load_config(None).shared_subscriptions
    assert (shared.enabled, shared.strategy) == (True, "round_robin")


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_every_strategy_is_accepted(tmp_path: Path, strategy: str) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(f'[shared_subscriptions]\nenabled = false\nstrategy = "{strategy}"\n')
    shared = load_config(path).shared_subscriptions
    assert (shared.enabled, shared.strategy) == (False, strategy)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('strategy = "fastest"', "strategy must be one of round_robin, random"),
        ("enabled = 1", "enabled must be bool"),
        ("group = 2", "unknown key 'group'"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(f"[shared_subscriptions]\n{text}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)
