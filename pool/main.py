"""`python -m actors.main --workers N` (N > 1): the pool's supervisor process (docs/pool.md).

It binds every configured listener once (and the admin HTTP listener, which worker 0
serves), then runs the pool's one store process (unless `[store] kind = "none"`) and N
workers (`python -m actors.main ... --worker-id I`) under `pool.supervisor.Supervisor`,
which starts the store process first, restarts the store process and the workers when they
die, forwards SIGHUP and SIGTERM, and makes the workers end with it. Each TCP-family
listener (tcp, tls, ws, wss) is bound once per worker with SO_REUSEPORT, so the kernel
spreads new connections over the workers by a hash of their addresses, as nginx's
`reuseport` does: a burst of a few connections does not all land on the worker that woke
first, as it did when the workers shared one socket. The supervisor keeps
every socket open, so the connections that arrive for a worker while it restarts wait in its
socket's backlog for the new process. A Unix-socket listener is one socket the workers share.

It logs "ready: accepting MQTT connections on HOST:PORT" once every worker has said, on the
ready pipe, that it accepts: then every worker is linked to the others and has restored
its sessions. `[store] kind = "memory"` is served, in a pool, by the store process on a file
in the pool's run directory that is removed at exit: lost at exit like a memory store, but
shared by the workers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from actors.config import BrokerConfig
from net.endpoint import Endpoint
from net.listener import bind_unix
from net.listener_config import ListenerConfig
from net.tls_context import TlsSetupError
from pool.supervisor import Supervisor
from pool.worker import STORE_SOCKET
from store import SQLITE_FILE_NAME
from store.sqlite_store import check_store_file

logger = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024
STORE_STOP_TIMEOUT = 10.0


def run_pool(config: BrokerConfig, workers: int, argv: list[str]) -> int:
    """Run the pool until SIGTERM/SIGINT; the exit status (0: every worker exited 0).
    Raises store.base.StoreError if the store file cannot be a store."""
    run_dir = Path(tempfile.mkdtemp(prefix="mqtt-pool-"))
    store: StoreProcess | None = None
    supervisor: Supervisor | None = None
    sockets: list[socket.socket] = []
    # listeners[i][w]: the socket worker w accepts on for listener i (one shared for unix)
    listeners: list[list[socket.socket]] = []
    try:
        if config.store.kind != "none":
            store = StoreProcess(config, run_dir)
        failed = _listen(config, workers, listeners, sockets)
        if failed:
            return failed
        ready_r, ready_w = os.pipe()
        address = _ready_address(config, listeners)
        threading.Thread(
            target=_announce_ready, args=(ready_r, workers, address), daemon=True
        ).start()
        # Worker 0 serves the admin HTTP API on the socket bound last by _listen; the others
        # run without one.
        http_fd = sockets[-1].fileno() if config.http.port else None

        def command(worker_id: int) -> list[str]:
            admin = []
            if http_fd is not None:
                admin = ["--http-fd", str(http_fd)] if worker_id == 0 else ["--http-port", "0"]
            return [
                sys.executable,
                "-m",
                "actors.main",
                *argv,
                "--workers",
                str(workers),
                "--worker-id",
                str(worker_id),
                "--pool-dir",
                str(run_dir),
                "--listen-fds",
                _listen_fds(listeners, worker_id),
                "--ready-fd",
                str(ready_w),
                *admin,
            ]

        logger.info("pool: starting %d workers (run directory %s)", workers, run_dir)
        # A worker exiting with 2 (a configuration error: plugins, TLS) stops the pool.
        passed = [sock.fileno() for sock in sockets]
        supervisor = Supervisor(
            command, workers, pass_fds=[*passed, ready_w], fatal_status=2, companion=store
        )
        status = supervisor.run()
        os.close(ready_w)
        return status
    finally:
        for sock in sockets:
            sock.close()
        if store is not None:
            store.end(None if supervisor is None else supervisor.companion_process)
        for listener, _bound in zip(config.listeners, listeners, strict=False):
            if listener.type == "unix":  # bound here: the socket file is the pool's
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(listener.path)
        shutil.rmtree(run_dir, ignore_errors=True)


class StoreProcess:
    """The pool's store process (`python -m store.store_process --listen`), started and
    restarted by the supervisor (an `pool.supervisor.Companion`). Every one listens on
    RUN_DIR/store.sock, where the workers connect (again, after a restart), and ends once
    the pipe whose read end it inherits has closed (`end`) and its workers are gone."""

    name = "the store process"

    def __init__(self, config: BrokerConfig, run_dir: Path) -> None:
        """Raises store.base.StoreError if the store file cannot be a store."""
        settings = config.store
        if settings.kind == "memory":
            self._path = run_dir / "memory-store.sqlite3"
        else:
            data_dir = Path(settings.data_dir)
            data_dir.mkdir(parents=True, exist_ok=True)
            self._path = data_dir / SQLITE_FILE_NAME
            check_store_file(self._path)  # StoreError: the caller says it as one broker would
        self._listen = run_dir / STORE_SOCKET
        self._synchronous = settings.synchronous
        self._log_level = config.log_level
        # Every store process inherits the read end; closing the write end ends the last.
        self._parent_r, self._parent_w = os.pipe()
        project_root = Path(__file__).resolve().parent.parent
        self._env = dict(os.environ)
        self._env["PYTHONPATH"] = os.pathsep.join(
            filter(None, (str(project_root), self._env.get("PYTHONPATH")))
        )
        logger.info("pool: the store is %s, served on %s", self._path, self._listen)

    def start(self) -> subprocess.Popen[bytes]:
        # The socket file of a process that died stays: ready() waits for the new one's.
        with contextlib.suppress(FileNotFoundError):
            self._listen.unlink()
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "store.store_process",
                "--listen",
                str(self._listen),
                "--parent-fd",
                str(self._parent_r),
                "--synchronous",
                self._synchronous,
                "--log-level",
                self._log_level,
                str(self._path),
            ],
            pass_fds=(self._parent_r,),
            env=self._env,
        )

    def ready(self, process: subprocess.Popen[bytes]) -> bool:
        return self._listen.exists()

    def end(self, process: subprocess.Popen[bytes] | None) -> None:
        """Close the pipe (`process`, the latest store process, ends once the workers are
        gone) and wait for it."""
        os.close(self._parent_w)
        os.close(self._parent_r)
        if process is None:
            return
        try:
            process.wait(STORE_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            logger.error("pool: the store process did not end in time: killed")
            process.kill()
            process.wait()


def _listen(
    config: BrokerConfig,
    workers: int,
    listeners: list[list[socket.socket]],
    sockets: list[socket.socket],
) -> int:
    """Check the listeners' TLS files and bind each listener into `listeners` (its sockets,
    one per worker) and every socket into `sockets`, then the admin HTTP listener (unless
    `[http] port` is 0) into `sockets`, logging as one broker would; 0, or the exit status
    (2: TLS configuration, 1: an address in use)."""
    try:
        endpoints = [Endpoint(listener) for listener in config.listeners]
    except TlsSetupError as error:
        logger.error("TLS configuration error: %s", error)
        return 2
    for endpoint in endpoints:
        try:
            own = _bind_per_worker(endpoint.config, workers)
        except OSError as error:
            logger.error(
                "cannot listen for %s: %s (is another broker running? change the port)",
                endpoint.name,
                error.strerror or error,
            )
            return 1
        listeners.append(own)
        sockets.extend(own)
    http = config.http
    if http.port:
        try:
            sockets.append(_bind(http.host, http.port))
        except OSError as error:
            logger.error(
                "cannot listen for the admin HTTP API on %s:%d: %s (change [http] port; 0 "
                "turns it off)",
                http.host,
                http.port,
                error.strerror or error,
            )
            return 1
    return 0


def _bind_per_worker(listener: ListenerConfig, workers: int) -> list[socket.socket]:
    """The listening sockets for `listener`: one per worker, all on one port with
    SO_REUSEPORT (the first picks the port when it is 0); a Unix socket's one, shared."""
    if listener.type == "unix":
        sock = bind_unix(listener.path, LISTEN_BACKLOG)
        return [socket.socket(fileno=sock.detach())]
    port = _free_port(listener.host, listener.port)
    own: list[socket.socket] = []
    try:
        own.extend(_bind_for_worker(listener.host, port) for _ in range(workers))
    except OSError:
        for sock in own:
            sock.close()
        raise
    return own


def _free_port(host: str, port: int) -> int:
    """`port` (or a free one for 0) after checking that nothing is bound to it. A plain bind
    does the check: SO_REUSEPORT sockets would join another process's group on the port (of
    the same user: a second broker) instead of failing with "address in use"."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        return int(probe.getsockname()[1])


def _family(host: str, port: int) -> socket.AddressFamily:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]


def _bind(host: str, port: int) -> socket.socket:
    return socket.create_server((host, port), family=_family(host, port), backlog=LISTEN_BACKLOG)


def _bind_for_worker(host: str, port: int) -> socket.socket:
    """A worker's SO_REUSEPORT socket on `port`, bound but not listening: the worker listens
    once it can accept (`PoolBroker._listen_on`), so the port opens when the pool can serve
    it, as one process's does, and a connection made while the workers start is refused
    (the client retries) rather than left waiting in a backlog nobody reads yet. Once
    listening it stays so while its worker restarts (the supervisor keeps it)."""
    family = _family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as create_server
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _listen_fds(listeners: list[list[socket.socket]], worker_id: int) -> str:
    """`--listen-fds` for `worker_id`: its own socket of each listener (or the shared one)."""
    return ",".join(str(own[worker_id % len(own)].fileno()) for own in listeners)


def _ready_address(config: BrokerConfig, listeners: list[list[socket.socket]]) -> str:
    index = next((i for i, x in enumerate(config.listeners) if x.type == "tcp"), 0)
    if config.listeners[index].type == "unix":
        return config.listeners[index].path
    host, port = listeners[index][0].getsockname()[:2]
    return f"{host}:{port}"


def _announce_ready(ready_r: int, workers: int, address: str) -> None:
    """Log the ready line once every worker has written its id to the ready pipe; then keep
    reading it (restarted workers write there too) until the pool ends."""
    seen: set[int] = set()
    with os.fdopen(ready_r, "rb", buffering=0) as pipe:
        while data := pipe.read(64):
            if len(seen) < workers:
                seen.update(data)
                if len(seen) == workers:
                    logger.info(
                        "ready: accepting MQTT connections on %s (%d workers)", address, workers
                    )
