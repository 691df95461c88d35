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
    # The pure core is shared by everything below the actors: it depends on none of them.
    "core": frozenset({"gevent", "pykka", "socket", "actors", "hooks", "store", "plugins"}),
    # The connection protocol is pure: packets in, actions out; the actors carry them out.
    "channel": frozenset({"gevent", "pykka", "socket", "actors", "store", "plugins"}),
    # The session protocol is pure too: the session actor carries its actions out.
    "session": frozenset({"gevent", "pykka", "socket", "actors", "store", "plugins"}),
    # The plugin API (hooks/) is for plugins: the store and Spark need only the core types.
    "store": frozenset({"hooks", "actors", "plugins", "pool", "admin"}),
    "spark": frozenset({"hooks", "actors", "plugins", "gevent", "pykka"}),
    # The socket side knows the codec, the core and the channel's intake; the actors own
    # connections through its protocols, never the other way round.
    "net": frozenset(
        {"actors", "pykka", "store", "plugins", "hooks", "router", "pool", "admin", "bridge"}
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
    *("mqtt", "core", "channel", "session", "net", "router", "hooks", "pool", "actors", "store"),
    *("plugins", "bridge", "cluster"),
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
        if name.split(".")[0] in ("actors", "net", "pool", "admin", "bridge")
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


# The pool's frames, ownership, route replication and bookkeeping are pure, and so is the
# fabric's interface; its link, node and worker are the I/O that carries them.
POOL_PURE = (
    *("frames/*.py", "ownership.py", "orphans.py", "outbox.py", "flow_control.py"),
    *("connection_counts.py", "routes.py", "fabric.py", "ack_waits.py"),
)


@pytest.mark.parametrize("pattern", POOL_PURE)
def test_pool_pure_parts_are_sans_io(pattern: str) -> None:
    paths = sorted((ROOT / "pool").glob(pattern))
    assert paths, f"pool/{pattern} matches no module"
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            imported_roots(path) & (IO_ROOTS | {"actors", "store", "plugins", "admin"})
        )
        for path in paths
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_actors_know_neither_the_pool_nor_the_admin_surface() -> None:
    # actors/main.py is the composition root: it alone puts the pool and admin/ together
    # with the actors; the surfaces read a worker through actors.view.BrokerView.
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & {"pool", "admin"})
        for path in (ROOT / "actors").rglob("*.py")
        if path.name != "main.py"
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_actors_know_of_the_cluster_only_its_configuration() -> None:
    # A worker joins a cluster through actors.broker.ClusterPart, given by actors.main.
    used = {
        name
        for path in (ROOT / "actors").rglob("*.py")
        if path.name != "main.py"
        for name in imported_modules(path)
        if name.split(".")[0] == "cluster"
    }
    assert used <= {"cluster.config"}
    config = imported_roots(ROOT / "cluster" / "config.py")
    assert config & (IO_ROOTS | {"actors", "pool", "nats", "ssl"}) == set()
    assert all("admin" not in imported_roots(p) for p in (ROOT / "cluster").rglob("*.py"))


def test_the_pool_and_the_router_do_not_import_the_admin_surface_or_each_other() -> None:
    assert all("admin" not in imported_roots(p) for p in (ROOT / "pool").rglob("*.py"))
    assert all("pool" not in imported_roots(p) for p in (ROOT / "router").rglob("*.py"))


def _module_graph() -> dict[str, set[str]]:
    """Every module of the shipped packages and the modules of them it imports (also under
    TYPE_CHECKING: a circle of types is a circle to a reader)."""
    modules: dict[str, Path] = {}
    for package in SHIPPED:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            graph[name].update(n for n in names if n in modules and n != name)
    return graph


def test_no_import_circle() -> None:
    graph = _module_graph()
    done: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert circles == []
