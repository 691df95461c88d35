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
    # The session protocol is pure too: the session actor carries its actions out.
    "session": frozenset({"gevent", "pykka", "socket", "actors", "store", "plugins"}),
    # The plugin API (hooks/) is for plugins: the store and Spark need only the core types.
    "store": frozenset({"hooks", "actors", "plugins"}),
    "spark": frozenset({"hooks", "actors", "plugins", "gevent", "pykka"}),
    # The socket side knows the codec, the core and the channel's intake; the actors own
    # connections through its protocols, never the other way round.
    "net": frozenset(
        {"actors", "pykka", "store", "plugins", "hooks", "router", "fabric", "admin", "bridge"}
    ),
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
SANS_IO_MODULES = (
    *("stream_layers", "tls_layer", "websocket_layer", "tls_context", "endpoint"),
    "listener_config",
)
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
    path = ROOT / "net" / f"{module}.py"
    assert imported_roots(path) & IO_ROOTS == set()
    net_imports = {name for name in imported_modules(path) if name.startswith("net.")}
    assert net_imports <= {f"net.{name}" for name in SANS_IO_MODULES}


def test_net_uses_only_the_intake_of_the_channel() -> None:
    used = {
        name
        for path in (ROOT / "net").rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] == "channel"
    }
    assert used <= {"channel.intake"}


# paho-mqtt is a client library (the `dev` and `load` extras), not a broker dependency: of the
# packages the project ships, only the paho SCRAM adapter, itself a client library, imports it.
SHIPPED = (
    *("mqtt", "core", "channel", "session", "net", "router", "hooks", "fabric", "actors", "store"),
    "plugins",
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


# Plugins build on the plugin API (hooks/, plugins/base.py) and the core: of the broker's
# runtime they use only the rate-limited log (plugins.offload logs backend failures through
# it), a leaf of the socket side that imports nothing of the broker.
PLUGIN_RUNTIME_IMPORTS = frozenset({"net.rate_limited_log"})


def test_plugins_import_no_runtime_but_the_rate_limited_log() -> None:
    used = {
        name
        for path in (ROOT / "plugins").rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in ("actors", "net", "fabric", "admin", "bridge")
    }
    assert used <= PLUGIN_RUNTIME_IMPORTS
    leaf = imported_roots(ROOT / "net" / "rate_limited_log.py")
    assert leaf & {"actors", "channel", "hooks", "plugins", "store", "net"} == set()


# A bridge's pure parts (its configuration, topic lines, back-off, relay and placement) do
# no I/O and know nothing of the actors; its sockets and its link to the broker are the
# other modules of bridge/.
BRIDGE_PURE = ("config", "topics", "backoff", "relay", "placement")


@pytest.mark.parametrize("module", BRIDGE_PURE)
def test_bridge_pure_parts_are_sans_io(module: str) -> None:
    path = ROOT / "bridge" / f"{module}.py"
    assert imported_roots(path) & (IO_ROOTS | {"actors", "store", "plugins", "ssl"}) == set()
