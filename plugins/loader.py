"""Load, reload and close the plugins listed in the broker's `[[plugins]]` tables.

Each table is `{"module": "package.module", **options}`. Loading imports the module, builds
its `Plugin(options, context)` and calls `register(bus)`, in the configured order. Any
failure (module not found, no `Plugin` class, bad option, unreadable file) raises
PluginConfigError naming the plugin, after closing the plugins already loaded, so the broker
can stop with one clear message. Reload and close never raise: a plugin that fails is logged
and the others carry on.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hooks.hook_bus import HookBus
from plugins.base import Plugin, PluginConfigError, PluginContext

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedPlugin:
    name: str  # the module name; also the owner of its hook registrations
    plugin: Plugin


def load_plugins(
    configs: Iterable[Mapping[str, Any]], bus: HookBus, context: PluginContext
) -> list[LoadedPlugin]:
    """Import, construct and register every configured plugin, in order."""
    loaded: list[LoadedPlugin] = []
    try:
        for config in configs:
            loaded.append(_load_one(config, bus, context, {p.name for p in loaded}))
    except BaseException:
        close_plugins(loaded, bus)
        raise
    return loaded


def check_plugins(configs: Iterable[Mapping[str, Any]], context: PluginContext) -> None:
    """Build every configured plugin and close it again, without registering it: raises the
    PluginConfigError `load_plugins` would raise for a missing module, a bad option or an
    unreadable file. A pool's supervisor calls it before it starts anything, so such an
    error stops the pool at once, as it stops one process (a failing `register()` is found
    by the workers, which load the plugins for real)."""
    built: list[LoadedPlugin] = []
    try:
        for config in configs:
            built.append(_build_one(config, context, {p.name for p in built}))
    finally:
        for loaded in reversed(built):
            _close(loaded)


def _load_one(
    config: Mapping[str, Any], bus: HookBus, context: PluginContext, seen: set[str]
) -> LoadedPlugin:
    loaded = _build_one(config, context, seen)
    try:
        loaded.plugin.register(bus)
    except Exception as error:
        bus.unregister(loaded.name)
        _close(loaded)
        raise PluginConfigError(f"plugin {loaded.name}: register() failed: {error}") from error
    logger.info("plugin %s loaded", loaded.name)
    return loaded


def _build_one(config: Mapping[str, Any], context: PluginContext, seen: set[str]) -> LoadedPlugin:
    """The plugin of one `[[plugins]]` table, built with its options (not registered)."""
    name = config.get("module")
    if not isinstance(name, str) or not name:
        raise PluginConfigError(
            f"plugin table {dict(config)!r}: 'module' must name a Python module, "
            'e.g. module = "plugins.auth_file"'
        )
    if name in seen:
        raise PluginConfigError(f"plugin {name}: listed twice in [[plugins]]; keep one table")
    plugin_class = _plugin_class(name)
    options = {key: value for key, value in config.items() if key != "module"}
    plugin_context = dataclasses.replace(context, plugin_name=name)
    try:
        plugin = plugin_class(options, plugin_context)
    except PluginConfigError:
        raise
    except Exception as error:
        raise PluginConfigError(f"plugin {name}: failed to start: {error}") from error
    return LoadedPlugin(name, plugin)


def _plugin_class(name: str) -> Any:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name + ".").startswith(error.name + "."):
            raise PluginConfigError(
                f"plugin {name}: module not found; check the name and that its package is "
                "installed or on PYTHONPATH"
            ) from error
        raise PluginConfigError(
            f"plugin {name}: the module imports {error.name!r}, which is not installed"
        ) from error
    plugin_class = getattr(module, "Plugin", None)
    if not isinstance(plugin_class, type):
        raise PluginConfigError(
            f"plugin {name}: the module has no 'Plugin' class (see docs/plugins.md)"
        )
    return plugin_class


def reload_plugins(plugins: Iterable[LoadedPlugin]) -> None:
    """Call `reload()` on every plugin that has one (SIGHUP); failures are logged."""
    for loaded in plugins:
        reload = getattr(loaded.plugin, "reload", None)
        if reload is None:
            continue
        try:
            reload()
        except Exception:
            logger.exception("plugin %s: reload failed; it keeps its previous state", loaded.name)
        else:
            logger.info("plugin %s reloaded", loaded.name)


def close_plugins(plugins: Iterable[LoadedPlugin], bus: HookBus) -> None:
    """Unregister and close plugins in reverse load order; failures are logged."""
    for loaded in reversed(list(plugins)):
        bus.unregister(loaded.name)
        _close(loaded)


def _close(loaded: LoadedPlugin) -> None:
    try:
        loaded.plugin.close()
    except Exception:
        logger.exception("plugin %s: close() failed", loaded.name)
