"""The plugin contract: what a module listed under `[[plugins]]` must provide.

A plugin is a module (`module = "package.module"` in the broker's TOML file; every other key
of that table is one of the plugin's options) that exposes `class Plugin`:

    class Plugin:
        def __init__(self, options: Mapping[str, object], context: PluginContext) -> None
        def register(self, bus: HookBus) -> None   # bus.register(..., owner=context.plugin_name)
        def close(self) -> None                    # release files, greenlets, connections
        def reload(self) -> None                   # optional: re-read files on SIGHUP

`__init__` validates its options, typically with `parse_options(Config, options, name)` and a
frozen `Config` dataclass, and raises `PluginConfigError` naming the option when one is wrong:
the broker refuses to start with that message. docs/plugins.md walks through an example.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from hooks.hook_bus import HookBus


class PluginConfigError(ValueError):
    """A plugin cannot be loaded: missing module, bad option or unreadable file.

    The message starts with "plugin <module>:" and names the option concerned.
    """


@dataclass(frozen=True, slots=True)
class PluginContext:
    """What the broker tells every plugin about where it runs.

    `config_dir` is the directory of the broker's configuration file: relative file paths in
    plugin options are resolved against it (`resolve`). `plugin_name` is the module name the
    plugin was loaded as; pass it as `owner=` when registering callbacks.
    """

    config_dir: Path
    node_name: str
    worker_id: int
    plugin_name: str = ""

    def resolve(self, path: Path) -> Path:
        """`path` itself if absolute, else relative to the configuration file's directory."""
        return path if path.is_absolute() else self.config_dir / path


@runtime_checkable
class Plugin(Protocol):
    """The interface the loader calls; `reload()` is optional and not part of the check."""

    def register(self, bus: HookBus) -> None: ...

    def close(self) -> None: ...


ConfigT = TypeVar("ConfigT")
_UNION_TYPES = (typing.Union, types.UnionType)


def parse_options(
    config_class: type[ConfigT], options: Mapping[str, object], plugin: str
) -> ConfigT:
    """Build the frozen dataclass `config_class` from a plugin's `options`.

    Supported field types: str, int, float (an int is accepted), bool, Path (from a string),
    and unions of these with None. Unknown keys, missing required keys and values of the
    wrong type raise PluginConfigError naming the plugin and the option.
    """
    if not is_dataclass(config_class):
        raise TypeError(f"{config_class!r} is not a dataclass")
    hints = typing.get_type_hints(config_class)
    known = {f.name: f for f in fields(config_class)}
    for key in options:
        if key not in known:
            raise PluginConfigError(
                f"plugin {plugin}: unknown option {key!r}; known options: {', '.join(known)}"
            )
    values: dict[str, Any] = {}
    for name, spec in known.items():
        if name not in options:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise PluginConfigError(f"plugin {plugin}: option {name!r} is required")
            continue
        values[name] = _convert(options[name], hints[name], plugin, name)
    return config_class(**values)


def _convert(value: object, hint: Any, plugin: str, name: str) -> Any:
    choices = typing.get_args(hint) if typing.get_origin(hint) in _UNION_TYPES else (hint,)
    for choice in choices:
        converted = _as(value, choice)
        if converted is not MISSING:
            return converted
    wanted = " or ".join(getattr(c, "__name__", str(c)) for c in choices)
    raise PluginConfigError(
        f"plugin {plugin}: option {name!r} must be {wanted}, got {type(value).__name__} {value!r}"
    )


def _as(value: object, kind: Any) -> Any:
    """`value` converted to `kind`, or MISSING if it is not of that kind (bool is not int)."""
    if kind is type(None):
        return None if value is None else MISSING
    if kind is bool or kind is int or kind is str:
        return value if type(value) is kind else MISSING
    if kind is float:
        return float(value) if type(value) in (int, float) else MISSING  # type: ignore[arg-type]
    if kind is Path:
        return Path(value) if isinstance(value, str | Path) else MISSING
    raise TypeError(f"parse_options does not support option type {kind!r}")
