"""`python -m admin.ctl` (`actor-mqtt-broker-ctl`): the admin API from a shell.

Like `mosquitto_ctrl` and `emqx ctl`: every command is one or two requests to a running
broker's admin HTTP listener (`[http]`, docs/operations.md). Tables for people; `--json`
prints the API's JSON for scripts. The broker's address and credentials come from options or
the environment (ACTOR_MQTT_URL, ACTOR_MQTT_API_KEY, or ACTOR_MQTT_USER and
ACTOR_MQTT_PASSWORD for a password-file user).

Exit codes: 0 done, 1 the broker refused or failed the request (the message says why),
2 wrong usage, 3 the broker could not be reached.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode
from urllib.request import Request, urlopen

import orjson

from admin.auth import hash_key, new_key

DEFAULT_URL = "http://127.0.0.1:18083"
TIMEOUT = 10.0  # seconds per request


class CtlError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Client:
    """The admin API over HTTP, with the credentials of the command line."""

    def __init__(self, url: str, api_key: str | None, user: str | None, password: str | None):
        self._url = url.rstrip("/")
        self._headers = {"Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        elif user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"

    def call(
        self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None
    ) -> Any:
        url = self._url + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = orjson.dumps(body) if body is not None else None
        headers = dict(self._headers)
        if data is not None or method != "GET":
            # The broker takes state-changing requests with a JSON body only (CSRF).
            headers["Content-Type"] = "application/json"
        request = Request(url, data=data, headers=headers, method=method)
        try:
            with urlopen(request, timeout=TIMEOUT) as response:
                raw = response.read()
        except HTTPError as error:
            detail = error.read()
            try:
                message = orjson.loads(detail)["error"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                message = detail.decode(errors="replace") or error.reason
            raise CtlError(f"{method} {path}: {error.code} {message}", 1) from error
        except (URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise CtlError(
                f"cannot reach the broker at {self._url}: {reason} (is it running, with an "
                "[http] listener? set --url or ACTOR_MQTT_URL)",
                3,
            ) from error
        return orjson.loads(raw) if raw else None


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned text columns under a header."""
    cells = [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(column: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # a route's nodes
        return ",".join(str(item) for item in value)
    if column in ("until", "connected_at", "created_at") and isinstance(value, int | float):
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
    return str(value)


def _paged(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"page": args.page, "limit": args.limit, **(extra or {})}


def _render(args: argparse.Namespace, result: Any) -> str:
    """What a command prints: JSON with --json, else a table or a line per command."""
    if args.json:
        return orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    columns = COLUMNS.get((args.command, getattr(args, "action", None)))
    if columns is not None:
        rows = result["data"] if isinstance(result, dict) and "data" in result else result
        text = table(rows, columns)
        if isinstance(result, dict) and "meta" in result:
            meta = result["meta"]
            text += f"\n({len(rows)} of {meta['count']}, page {meta['page']})"
        return text + left_out(result)
    if args.command == "status":
        return _status_text(result)
    if isinstance(result, dict):
        return "\n".join(f"{key}: {value}" for key, value in result.items())
    return "ok" if result is None else str(result)


def left_out(result: Any) -> str:
    """A line naming the workers of the node and the other nodes of a cluster that did not
    answer in time (the table leaves their rows out), or nothing."""
    if not isinstance(result, dict):
        return ""
    left_out = []
    if result.get("missing_workers"):
        left_out.append(f"workers {result['missing_workers']}")
    if result.get("missing_nodes"):
        left_out.append(f"nodes {', '.join(result['missing_nodes'])}")
    return f"\nleft out (no answer in time): {'; '.join(left_out)}" if left_out else ""


def _status_text(stats: dict[str, Any]) -> str:
    """This node's figures; in a cluster, then the nodes' added up, indented."""
    rows = [
        ("node", stats["node"]),
        ("uptime", f"{int(stats['uptime'])} s"),
        *_figure_rows(stats, ""),
    ]
    if stats.get("missing_workers"):  # a pool's workers that did not answer in time
        rows.append(("left out", f"workers {stats['missing_workers']}"))
    cluster = stats.get("cluster")
    if cluster is not None:
        rows.append(("cluster", ", ".join(cluster["nodes"])))
        if cluster["missing_nodes"]:  # nodes that did not answer in time
            rows.append(("  left out", f"nodes {', '.join(cluster['missing_nodes'])}"))
        rows += _figure_rows(cluster, "  ")
    return "\n".join(f"{name:<16} {value}" for name, value in rows)


def _figure_rows(stats: dict[str, Any], indent: str) -> list[tuple[str, Any]]:
    rows = [
        ("connections", f"{stats['connections']} (max {stats['connections_max']})"),
        ("sessions", stats["sessions"]),
        ("subscriptions", stats["subscriptions"]),
        ("retained", stats["retained"]),
        ("messages in", stats["messages_received"]),
        ("messages out", stats["messages_sent"]),
        ("dropped", stats["messages_dropped"] + stats["deliveries_dropped"]),
        ("bytes in/out", f"{stats['bytes_received']} / {stats['bytes_sent']}"),
        ("queued/inflight", f"{stats['queued']} / {stats['inflight']}"),
        ("bans", stats["banned"]),
    ]
    return [(indent + name, value) for name, value in rows]


COLUMNS: dict[tuple[str, str | None], list[str]] = {
    ("clients", "list"): [
        "clientid",
        "node",
        "username",
        "peer",
        "proto_ver",
        "keepalive",
        "queue",
    ],
    ("sessions", "list"): ["clientid", "node", "connected", "persistent", "subscriptions", "queue"],
    ("subscriptions", "list"): ["clientid", "node", "topic", "qos"],
    ("retained", "list"): ["topic", "qos", "size", "payload"],
    ("ban", "list"): ["kind", "value", "until", "reason"],
    ("plugins", "list"): ["name", "reloadable"],
    ("plugins", "reload"): ["name", "reloadable"],
    ("routes", None): ["topic", "subscribers", "nodes"],
    ("cluster", None): ["node", "state", "workers"],
    ("bridges", None): [
        "name",
        "connected",
        "address",
        "sent",
        "received",
        "queued",
        "dropped",
        "worker",
    ],
}


PLAIN_GETS = {  # command -> path
    "status": "/api/v1/stats",
    "bridges": "/api/v1/bridges",
    "cluster": "/api/v1/cluster",
}
PAGED_GETS = {  # command -> path of a list taking --page and --limit only
    "sessions": "/api/v1/sessions",
    "routes": "/api/v1/routes",
}


def run(args: argparse.Namespace, client: Client) -> Any:  # noqa: PLR0911 - one per command
    command, action = args.command, getattr(args, "action", None)
    if command in PLAIN_GETS:
        return client.call("GET", PLAIN_GETS[command])
    if command == "clients":
        if action == "list":
            query = _paged(args, {"clientid": args.search})
            return client.call("GET", "/api/v1/clients", query=query)
        path = "/api/v1/clients/" + quote(args.clientid, safe="")
        return client.call("DELETE" if action == "kick" else "GET", path)
    if command in PAGED_GETS:
        return client.call("GET", PAGED_GETS[command], query=_paged(args))
    if command == "subscriptions":
        query = _paged(args, {"clientid": args.clientid})
        return client.call("GET", "/api/v1/subscriptions", query=query)
    if command == "retained":
        if action == "list":
            query = _paged(args, {"topic": args.topic})
            return client.call("GET", "/api/v1/retained", query=query)
        path = "/api/v1/retained/" + quote(args.topic, safe="")
        return client.call("DELETE" if action == "delete" else "GET", path)
    if command == "publish":
        body = {"topic": args.topic, "payload": args.message, "qos": args.qos}
        return client.call("POST", "/api/v1/publish", {**body, "retain": args.retain})
    if command == "ban":
        return _ban(args, client)
    if command == "plugins":
        if action == "reload":
            return client.call("POST", "/api/v1/plugins/reload")
        return client.call("GET", "/api/v1/plugins")
    raise CtlError(f"unknown command {command!r}", 2)


def _ban(args: argparse.Namespace, client: Client) -> Any:
    if args.action == "list":
        return client.call("GET", "/api/v1/banned", query=_paged(args))
    if args.action == "remove":
        path = f"/api/v1/banned/{args.kind}/{quote(args.value, safe='')}"
        return client.call("DELETE", path)
    body: dict[str, Any] = {"kind": args.kind, "value": args.value, "reason": args.reason}
    if args.duration is not None:
        body["duration"] = args.duration
    return client.call("POST", "/api/v1/banned", body)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="actor-mqtt-broker-ctl", description="Operate a running actor-mqtt-broker."
    )
    parser.add_argument("--url", default=os.environ.get("ACTOR_MQTT_URL", DEFAULT_URL))
    parser.add_argument("--api-key", default=os.environ.get("ACTOR_MQTT_API_KEY"))
    parser.add_argument("--user", default=os.environ.get("ACTOR_MQTT_USER"))
    parser.add_argument("--password", default=os.environ.get("ACTOR_MQTT_PASSWORD"))
    parser.add_argument("--json", action="store_true", help="print the API's JSON")
    commands = parser.add_subparsers(dest="command", required=True)

    def listing(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--page", type=int, default=1)
        sub.add_argument("--limit", type=int, default=100)
        return sub

    commands.add_parser("status", help="the broker's figures")
    clients = commands.add_parser("clients", help="connected clients").add_subparsers(
        dest="action", required=True
    )
    listing(clients.add_parser("list")).add_argument("--search", help="client id contains")
    clients.add_parser("show").add_argument("clientid")
    clients.add_parser("kick", help="disconnect (5.0: reason 0x98)").add_argument("clientid")
    sessions = commands.add_parser("sessions").add_subparsers(dest="action", required=True)
    listing(sessions.add_parser("list"))
    subscriptions = commands.add_parser("subscriptions").add_subparsers(
        dest="action", required=True
    )
    listing(subscriptions.add_parser("list")).add_argument("--clientid")
    listing(commands.add_parser("routes", help="topic filters, subscribers and their nodes"))
    retained = commands.add_parser("retained").add_subparsers(dest="action", required=True)
    listing(retained.add_parser("list")).add_argument("--topic", help="a topic filter")
    retained.add_parser("get").add_argument("topic")
    retained.add_parser("delete").add_argument("topic")
    publish = commands.add_parser("publish", help="publish a message as the broker")
    publish.add_argument("topic")
    publish.add_argument("message")
    publish.add_argument("-q", "--qos", type=int, choices=(0, 1, 2), default=0)
    publish.add_argument("-r", "--retain", action="store_true")
    ban = commands.add_parser("ban", help="the banned table").add_subparsers(
        dest="action", required=True
    )
    listing(ban.add_parser("list"))
    add = ban.add_parser("add", help="refuse CONNECTs with CONNACK 0x8A")
    add.add_argument("kind", choices=("clientid", "username", "peerhost"))
    add.add_argument("value", help="client id, user name, IP address or CIDR block")
    add.add_argument("--duration", type=float, help="seconds (default: until removed)")
    add.add_argument("--reason", default="")
    remove = ban.add_parser("remove")
    remove.add_argument("kind", choices=("clientid", "username", "peerhost"))
    remove.add_argument("value")
    commands.add_parser("bridges", help="the bridges to other brokers and their state")
    commands.add_parser("cluster", help="the nodes of the cluster this broker sees")
    plugins = commands.add_parser("plugins").add_subparsers(dest="action", required=True)
    plugins.add_parser("list")
    plugins.add_parser("reload", help="as SIGHUP: plugin files, certificates, ACL re-check")
    commands.add_parser("new-key", help="make an API key and the hash for [http] api_keys")
    commands.add_parser("hash-key", help="the [http] api_keys entry of a key").add_argument("key")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "new-key":
        key = new_key()
        sys.stdout.write(f"key:  {key}\nhash: {hash_key(key)}  (put the hash in [http] api_keys)\n")
        return 0
    if args.command == "hash-key":
        sys.stdout.write(hash_key(args.key) + "\n")
        return 0
    client = Client(args.url, args.api_key, args.user, args.password)
    try:
        result = run(args, client)
    except CtlError as error:
        sys.stderr.write(f"error: {error}\n")
        return error.exit_code
    sys.stdout.write(_render(args, result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
