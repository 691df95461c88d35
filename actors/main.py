"""`python -m actors.main`: run the MQTT broker until SIGINT/SIGTERM.

Usage: python -m actors.main [--config PATH] [--host HOST] [--port PORT] [--log-level LEVEL]
                            [--data-dir DIR] [--store sqlite|memory|none] [--workers N|auto]
                            [--http-port PORT] [--sys-interval SECONDS]

`--workers` (or `[broker] workers`) above 1 runs a process pool: this process becomes its
supervisor (pool.main) and starts the workers, which run this module again with
`--worker-id` (docs/pool.md). The default, "auto", is one worker per CPU core this process
may use (one process, with no supervisor, on a single core), each worker pinned to its core
(`[broker] cpu_affinity`, pool.cpu_affinity); 1 is one process.

Defaults: 127.0.0.1:1883 (loopback only, like Mosquitto 2). `--port 0` picks a free port;
the "ready" log line names the address actually bound. More listeners (tls, ws, wss, unix)
come from `[[listeners]]` in the configuration file. SIGHUP reloads plugin files and TLS
certificates.
"""

from __future__ import annotations

import argparse
import logging
import resource
import signal
import sys
from functools import partial
from pathlib import Path

import gevent
import gevent.event

from actors.broker import Broker, ListenError
from actors.config import BrokerConfig, ConfigError, load_config
from actors.idle_gc import start_idle_gc
from admin.server import AdminServer
from admin.tables import local_rows
from cluster.member import ClusterMember
from net.tls_context import TlsSetupError
from plugins.base import PluginConfigError, PluginContext
from plugins.loader import check_plugins
from pool.cpu_affinity import pin_worker, usable_cpus
from pool.main import run_pool
from pool.worker import PoolBroker
from store.base import StoreError

logger = logging.getLogger("actors.main")

LOG_LEVELS = ("debug", "info", "warning", "error")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m actors.main",
        description="An MQTT 3.1/3.1.1/5.0 broker on pykka actors and gevent.",
    )
    parser.add_argument(
        "--config", type=Path, help="TOML configuration file (docs/configuration.md)"
    )
    parser.add_argument("--host", help="address of the first tcp listener (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="port of the first tcp listener (default 1883; 0: a free one)"
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="default info")
    parser.add_argument("--data-dir", help="where the store keeps its file (default ./data)")
    parser.add_argument(
        "--store", choices=("sqlite", "memory", "none"), help="persistence backend (default sqlite)"
    )
    parser.add_argument(
        "--workers",
        help='worker processes: "auto" (the default: the CPU cores) or a number (1: one process)',
    )
    parser.add_argument(
        "--http-port", type=int, help="port of the admin HTTP listener (default 18083; 0: none)"
    )
    parser.add_argument(
        "--sys-interval", type=float, help="seconds between $SYS updates (default 10; 0: none)"
    )
    # Given by the pool's supervisor to its workers (pool.main), not by people.
    parser.add_argument("--worker-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pool-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--listen-fds", default="", help=argparse.SUPPRESS)
    parser.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--http-fd", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def raise_fd_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit: every connection holds a descriptor.

    Logs the limit the broker runs with (INFO), or a WARNING naming the limit it is left with
    and how to raise it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        logger.info(
            "file descriptor limit: %s (RLIMIT_NOFILE soft limit already at the hard limit)",
            _limit_text(soft),
        )
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as error:
        logger.warning(
            "file descriptor limit: %s (could not raise RLIMIT_NOFILE to the hard limit %s: %s); "
            "connections are refused once about that many are open: raise the limit with "
            "`ulimit -n` before starting the broker (LimitNOFILE= under systemd)",
            _limit_text(soft),
            _limit_text(hard),
            error,
        )
        return
    logger.info(
        "file descriptor limit: %s (RLIMIT_NOFILE raised from %s to the hard limit)",
        _limit_text(hard),
        _limit_text(soft),
    )


def _limit_text(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def _without_workers(argv: list[str]) -> list[str]:
    """The command line minus `--workers` (the supervisor gives its workers their own)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            kept.append(arg)
    return kept


def _supervise(config: BrokerConfig, workers: int, argv: list[str]) -> int:
    """Run the pool's supervisor (pool.main); the exit status. A plugin's
    configuration error stops it before anything starts, as it stops one process."""
    plugin_context = PluginContext(
        config_dir=config.config_dir, node_name=config.node_name, worker_id=0
    )
    try:
        check_plugins(config.plugins, plugin_context)
        return run_pool(config, workers, _without_workers(argv))
    except PluginConfigError as error:
        logger.error("plugin configuration error: %s", error)
        return 2
    except StoreError as error:
        logger.error("cannot open the store: %s", error)
        return 1


def _start(broker: Broker) -> int:
    """Start `broker`: 0, or the exit status after logging why it could not start
    (2: configuration, 1: the store or an address in use)."""
    try:
        broker.start()
    except TlsSetupError as error:
        logger.error("TLS configuration error: %s", error)
        return 2
    except ConfigError as error:
        logger.error("configuration error: %s", error)
        return 2
    except PluginConfigError as error:
        logger.error("plugin configuration error: %s", error)
        return 2
    except StoreError as error:
        logger.error("cannot open the store: %s", error)
        return 1
    except ListenError as error:
        logger.error("%s", error)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        "data_dir": args.data_dir,
        "store": args.store,
        "workers": args.workers,
        "http_port": args.http_port,
        "sys_interval": args.sys_interval,
    }
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config(args.config, overrides)
    except ConfigError as error:
        logger.error("configuration error: %s", error)
        return 2
    logging.getLogger().setLevel(config.log_level.upper())
    workers = config.workers or len(usable_cpus())
    if args.worker_id is None and workers > 1:
        return _supervise(config, workers, sys.argv[1:] if argv is None else argv)
    if args.worker_id is not None:
        logging.getLogger().handlers[0].setFormatter(
            logging.Formatter(
                f"%(asctime)s %(levelname)s %(name)s: [worker {args.worker_id}] %(message)s"
            )
        )
    raise_fd_limit()
    if args.worker_id is None:
        broker = Broker(config)
    else:
        pin_worker(config.cpu_affinity, args.worker_id, workers)
        broker = PoolBroker(
            config,
            args.worker_id,
            workers,
            run_dir=args.pool_dir,
            listen_fds=[int(fd) for fd in args.listen_fds.split(",") if fd],
            ready_fd=args.ready_fd,
            http_fd=args.http_fd,
        )
        broker.node.ops.answer = partial(local_rows, broker)  # the other workers' questions
    if config.cluster is not None:
        broker.cluster = ClusterMember(
            config.cluster,
            broker.worker_id,
            broker.context,
            broker,
            retained=lambda: broker.retained_index,
            clears=lambda: broker.retained_clears,
            bridges=tuple(bridge.name for bridge in config.bridges),
        )
        broker.cluster.ops.answer = partial(local_rows, broker)  # the other nodes' questions
    broker.admin = AdminServer
    # The signals are handled from before the "ready" line on, where their default action
    # would kill the broker: a SIGTERM sent as soon as that line appears (by a service
    # manager, a test) stops it as any other. One that comes while the broker starts stops
    # it once started; a SIGHUP then reloads it once started.
    stopping = gevent.event.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        gevent.signal_handler(signum, stopping.set)
    reload_asked = gevent.event.Event()
    early_reload = gevent.signal_handler(signal.SIGHUP, reload_asked.set)
    status = _start(broker)
    if status:
        return status
    # No yield from here to the `if`: a SIGHUP not handled yet goes to `broker.reload` only.
    gevent.signal_handler(signal.SIGHUP, broker.reload)
    early_reload.cancel()  # after: a signal with no handler left gets its default action
    if reload_asked.is_set():
        gevent.spawn(broker.reload)
    # The cyclic GC's cost is in scanning what connections keep alive: collect it in quiet
    # moments, not in the middle of a connection storm (core/gc_schedule.py).
    idle_gc = start_idle_gc()
    stopping.wait()
    idle_gc.stop()
    try:
        broker.stop()
    except StoreError as error:
        logger.error(
            "could not commit the last changes to the store: %s; acknowledged messages "
            "are safe, but some delivered ones may be delivered again after a restart",
            error,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
