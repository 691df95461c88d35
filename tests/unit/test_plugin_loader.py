"""Plugin loading: import, options, registration, failure messages, reload and close."""

from __future__ import annotations

import importlib
import itertools
import logging
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from hooks.events import (
    ClientConnected,
    ClientDisconnected,
    ClientInfo,
    DisconnectReason,
    SessionEvent,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginConfigError, PluginContext, parse_options
from plugins.loader import check_plugins, close_plugins, load_plugins, reload_plugins

_module_numbers = itertools.count()

# A plugin that records its life in a module-level list; EVENTS is shared by all instances.
RECORDING_PLUGIN = """
from hooks.hookpoints import HookPoint
EVENTS = []

class Plugin:
    def __init__(self, options, context):
        if options.get("fail") == "init":
            raise RuntimeError("cannot open the database")
        self.options = dict(options)
        self.context = context
        EVENTS.append(("init", context.plugin_name, self.options))

    def register(self, bus):
        if self.options.get("fail") == "register":
            raise RuntimeError("register exploded")
        bus.register(HookPoint.SESSION_CREATED, self.on_created, owner=self.context.plugin_name)

    def on_created(self, event):
        EVENTS.append(("event", self.context.plugin_name, event.client_id))

    def reload(self):
        if self.options.get("fail") == "reload":
            raise RuntimeError("reload exploded")
        EVENTS.append(("reload", self.context.plugin_name))

    def close(self):
        EVENTS.append(("close", self.context.plugin_name))
"""


@pytest.fixture
def context(tmp_path: Path) -> PluginContext:
    return PluginContext(config_dir=tmp_path, node_name="node@test", worker_id=0)


def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    name = f"test_plugin_module_{next(_module_numbers)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def events_of(name: str) -> list[tuple[object, ...]]:
    return importlib.import_module(name).EVENTS  # type: ignore[no-any-return]


def test_load_constructs_registers_with_owner_and_passes_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: PluginContext
) -> None:
    name = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    bus = HookBus()
    loaded = load_plugins([{"module": name, "colour": "blue"}], bus, context)
    assert [p.name for p in loaded] == [name]
    assert bus.owners(HookPoint.SESSION_CREATED) == [name]
    bus.run(HookPoint.SESSION_CREATED, SessionEvent(client_id="c9"))
    assert events_of(name) == [("init", name, {"colour": "blue"}), ("event", name, "c9")]


def test_close_unregisters_and_closes_in_reverse_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: PluginContext
) -> None:
    first = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    second = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    bus = HookBus()
    loaded = load_plugins([{"module": first}, {"module": second}], bus, context)
    close_plugins(loaded, bus)
    assert not bus.has(HookPoint.SESSION_CREATED)
    assert events_of(first)[-1] == ("close", first)
    assert events_of(second)[-1] == ("close", second)


def test_a_failing_plugin_closes_those_loaded_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: PluginContext
) -> None:
    good = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    bad = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    bus = HookBus()
    with pytest.raises(PluginConfigError, match=f"plugin {bad}: failed to start: cannot open"):
        load_plugins([{"module": good}, {"module": bad, "fail": "init"}], bus, context)
    assert not bus.has(HookPoint.SESSION_CREATED)
    assert events_of(good)[-1] == ("close", good)


def test_check_builds_and_closes_each_plugin_without_registering_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: PluginContext
) -> None:
    """What a pool's supervisor runs before it starts its workers."""
    first = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    second = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    check_plugins([{"module": first, "colour": "blue"}, {"module": second}], context)
    assert events_of(first) == [("init", first, {"colour": "blue"}), ("close", first)]
    assert events_of(second) == [("init", second, {}), ("close", second)]


def test_check_raises_the_error_loading_would_and_closes_what_it_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: PluginContext
) -> None:
    good = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    bad = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    with pytest.raises(PluginConfigError, match=f"plugin {bad}: failed to start: cannot open"):
        check_plugins([{"module": good}, {"module": bad, "fail": "init"}], context)
    assert events_of(good) == [("init", good, {}), ("close", good)]
    with pytest.raises(PluginConfigError, match=f"plugin {good}: listed twice"):
        check_plugins([{"module": good}, {"module": good}], context)


def test_a_failing_register_is_reported_and_its_partial_registrations_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: PluginContext
) -> None:
    name = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    bus = HookBus()
    with pytest.raises(PluginConfigError, match=f"plugin {name}: register\\(\\) failed"):
        load_plugins([{"module": name, "fail": "register"}], bus, context)
    assert events_of(name)[-1] == ("close", name)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"module": "plugins.no_such_plugin"}, "plugin plugins.no_such_plugin: module not found"),
        ({"module": "no_such_package.sub"}, "plugin no_such_package.sub: module not found"),
        ({"password_file": "x"}, "'module' must name a Python module"),
        ({"module": 42}, "'module' must name a Python module"),
        ({"module": "hooks.decisions"}, "plugin hooks.decisions: the module has no 'Plugin' class"),
    ],
)
def test_load_errors_name_the_plugin(
    config: dict[str, object], message: str, context: PluginContext
) -> None:
    with pytest.raises(PluginConfigError, match=message):
        load_plugins([config], HookBus(), context)


def test_a_missing_dependency_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: PluginContext
) -> None:
    name = make_module(tmp_path, monkeypatch, "import not_installed_dependency_xyz\n")
    with pytest.raises(PluginConfigError, match="imports 'not_installed_dependency_xyz'"):
        load_plugins([{"module": name}], HookBus(), context)


def test_the_same_module_twice_is_refused(context: PluginContext) -> None:
    configs = [{"module": "plugins.examples.connection_logger"}] * 2
    with pytest.raises(PluginConfigError, match="listed twice"):
        load_plugins(configs, HookBus(), context)


def test_a_bad_option_names_the_plugin_and_the_option(context: PluginContext) -> None:
    config = {"module": "plugins.examples.connection_logger", "levle": "debug"}
    with pytest.raises(
        PluginConfigError,
        match=re.escape(
            "plugin plugins.examples.connection_logger: unknown option 'levle'; "
            "known options: level"
        ),
    ):
        load_plugins([config], HookBus(), context)


def test_reload_calls_reload_and_isolates_a_failure(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    context: PluginContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    working = make_module(tmp_path, monkeypatch, RECORDING_PLUGIN)
    configs = [
        {"module": broken, "fail": "reload"},
        {"module": working},
        {"module": "plugins.examples.connection_logger"},  # has no reload(): skipped
    ]
    loaded = load_plugins(configs, HookBus(), context)
    with caplog.at_level(logging.ERROR, logger="plugins.loader"):
        reload_plugins(loaded)
    assert events_of(working)[-1] == ("reload", working)
    assert [r.getMessage() for r in caplog.records] == [
        f"plugin {broken}: reload failed; it keeps its previous state"
    ]


# -- parse_options ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SampleConfig:
    path: Path
    count: int = 1
    ratio: float = 0.5
    enabled: bool = False
    label: str | None = None


def test_parse_options_converts_and_defaults() -> None:
    config = parse_options(SampleConfig, {"path": "users.txt", "ratio": 2}, "p")
    assert config == SampleConfig(path=Path("users.txt"), count=1, ratio=2.0)
    assert isinstance(config.ratio, float)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "plugin p: option 'path' is required"),
        ({"path": "x", "extra": 1}, "plugin p: unknown option 'extra'"),
        ({"path": 3}, "plugin p: option 'path' must be Path, got int 3"),
        ({"path": "x", "count": True}, "option 'count' must be int, got bool True"),
        ({"path": "x", "count": "3"}, "option 'count' must be int, got str '3'"),
        ({"path": "x", "enabled": 1}, "option 'enabled' must be bool, got int 1"),
        ({"path": "x", "label": 5}, "option 'label' must be str or NoneType, got int 5"),
    ],
)
def test_parse_options_rejects_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        parse_options(SampleConfig, options, "p")


def test_context_resolves_relative_paths_against_the_config_dir(tmp_path: Path) -> None:
    context = PluginContext(config_dir=tmp_path, node_name="n", worker_id=1)
    assert context.resolve(Path("acl.txt")) == tmp_path / "acl.txt"
    assert context.resolve(Path("/etc/acl.txt")) == Path("/etc/acl.txt")


# -- the example plugin ----------------------------------------------------------------


def test_connection_logger_logs_connect_and_disconnect(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    bus = HookBus()
    load_plugins([{"module": "plugins.examples.connection_logger"}], bus, context)
    info = ClientInfo(
        client_id="dev1",
        username="u",
        peer="127.0.0.1:4000",
        protocol_version=5,
        clean_start=True,
        keepalive=30,
    )
    with caplog.at_level(logging.INFO, logger="plugins.examples.connection_logger"):
        bus.run(HookPoint.CLIENT_CONNECTED, ClientConnected(client=info, session_present=False))
        bus.run(
            HookPoint.CLIENT_DISCONNECTED,
            ClientDisconnected(client=info, reason=DisconnectReason.KEEPALIVE_TIMEOUT),
        )
    assert [r.getMessage() for r in caplog.records] == [
        "client dev1 connected from 127.0.0.1:4000 (user u, protocol level 5, "
        "session present False)",
        "client dev1 disconnected from 127.0.0.1:4000: keepalive_timeout",
    ]


def test_connection_logger_rejects_an_unknown_level(context: PluginContext) -> None:
    config = {"module": "plugins.examples.connection_logger", "level": "loud"}
    with pytest.raises(PluginConfigError, match="option 'level' must be"):
        load_plugins([config], HookBus(), context)
