"""plugins.auth_http: its options are checked at start-up, naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.auth_http import Plugin
from plugins.base import PluginConfigError, PluginContext


def build(tmp_path: Path, **options: object) -> Plugin:
    context = PluginContext(tmp_path, "node", 0, "plugins.auth_http")
    return Plugin(options, context)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "set 'auth_url', 'acl_url' or both"),
        ({"auth_url": "ftp://x/auth"}, "'auth_url' must be an http:// or https:// URL"),
        ({"acl_url": "localhost/acl"}, "'acl_url' must be an http:// or https:// URL"),
        ({"auth_url": "https://x/a", "ca_file": "missing.pem"}, "missing.pem is not a file"),
        ({"auth_url": "http://x/a", "on_failure": "allow"}, "'on_failure' must be"),
        ({"auth_url": "http://x/a", "cache_ttl": -1.0}, "'cache_ttl' must be >= 0"),
        ({"auth_url": "http://x/a", "url": "http://x"}, "unknown option 'url'"),
    ],
)
def test_bad_options_stop_the_broker_naming_the_option(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    with pytest.raises(PluginConfigError, match=message):
        build(tmp_path, **options)


def test_a_plugin_built_and_closed_unused_starts_no_thread(tmp_path: Path) -> None:
    plugin = build(tmp_path, auth_url="http://127.0.0.1:9/auth", acl_url="http://127.0.0.1:9/a")
    assert plugin._offload._pool is None
    plugin.close()
