"""Layering: the codec, core, router and hook bus are pure libraries, and the store and Spark
depend on the core, not on the plugin API (AST scan of their imports)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN: dict[str, frozenset[str]] = {
    "mqtt": frozenset({"socket", "gevent", "pykka", "asyncio", "threading", "select"}),
    "router": frozenset({"gevent", "pykka", "socket"}),
    "hooks": frozenset({"gevent", "pykka", "socket"}),
    # The fabric's frames and ownership are pure; the link that carries them is the I/O.
    "fabric": frozenset({"gevent", "pykka", "socket", "actors", "store", "plugins"}),
    # The pure core is shared by everything below the actors: it depends on none of them.
    "core": frozenset({"gevent", "pykka", "socket", "actors", "hooks", "store", "plugins"}),
    # The connection protocol is pure: packets in, actions out; the actors carry them out.
    "channel": frozenset({"gevent", "pykka", "socket", "actors", "store", "plugins"}),
    # The plugin API (hooks/) is for plugins: the store and Spark need only the core types.
    "store": frozenset({"hooks", "actors", "plugins"}),
    "spark": frozenset({"hooks", "actors", "plugins", "gevent", "pykka"}),
}


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (absolute imports only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_scanner_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import socket\nfrom gevent.pool import Pool\nif True:\n    import pykka\n")
    assert imported_roots(sample) == {"socket", "gevent", "pykka"}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_pure_package_imports_no_io_or_actor_runtime(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no Python files"
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & FORBIDDEN[package])
        for path in files
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


# The stream layers (TLS, WebSocket) and the listeners' endpoints that make them are sans-I/O:
# the reader and the transport own the socket. They may import each other and the
# configuration, and nothing else of actors/ (which would bring gevent in).
SANS_IO_MODULES = ("stream_layers", "tls_layer", "websocket_layer", "tls_context", "endpoint")
IO_ROOTS = frozenset({"socket", "gevent", "pykka", "asyncio", "threading", "select", "selectors"})


def imported_modules(path: Path) -> set[str]:
    """Full names of every module `path` imports (absolute imports only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", SANS_IO_MODULES)
def test_stream_layers_are_sans_io(module: str) -> None:
    path = ROOT / "actors" / f"{module}.py"
    assert imported_roots(path) & IO_ROOTS == set()
    actors_imports = {name for name in imported_modules(path) if name.startswith("actors.")}
    assert actors_imports <= {f"actors.{name}" for name in (*SANS_IO_MODULES, "config")}


# paho-mqtt is a client library (the `dev` and `load` extras), not a broker dependency: of the
# packages the project ships, only the paho SCRAM adapter, itself a client library, imports it.
SHIPPED = (
    *("mqtt", "core", "channel", "router", "hooks", "fabric", "actors", "store", "plugins"),
    *("spark", "loadtest", "admin"),
)


def test_only_the_paho_scram_adapter_imports_paho() -> None:
    importers = {
        str(path.relative_to(ROOT))
        for package in SHIPPED
        for path in (ROOT / package).rglob("*.py")
        if "paho" in imported_roots(path)
    }
    assert importers == {"plugins/auth_scram/paho_client.py"}


# Plugins build on the plugin API (hooks/, plugins/base.py) and the core: of the actors they
# use only the rate-limited log (plugins.offload logs backend failures through it), a leaf
# that imports nothing of the broker.
PLUGIN_ACTOR_IMPORTS = frozenset({"actors.rate_limited_log"})


def test_plugins_import_no_actor_but_the_rate_limited_log() -> None:
    used = {
        name
        for path in (ROOT / "plugins").rglob("*.py")
        for name in imported_modules(path)
        if name == "actors" or name.startswith("actors.")
    }
    assert used <= PLUGIN_ACTOR_IMPORTS
    leaf = imported_roots(ROOT / "actors" / "rate_limited_log.py")
    assert leaf & {"actors", "channel", "hooks", "plugins", "store"} == set()


# A bridge's pure parts (its configuration, topic lines, back-off, relay and placement) do
# no I/O and know nothing of the actors; its sockets and its link to the broker are the
# other modules of bridge/.
BRIDGE_PURE = ("config", "topics", "backoff", "relay", "placement")


@pytest.mark.parametrize("module", BRIDGE_PURE)
def test_bridge_pure_parts_are_sans_io(module: str) -> None:
    path = ROOT / "bridge" / f"{module}.py"
    assert imported_roots(path) & (IO_ROOTS | {"actors", "store", "plugins", "ssl"}) == set()
