"""ReadChecks: which sessions have each delivery checked for read access, and the answers.

A SUBSCRIBE is granted by client.authorize for its filter; a plugin may still deny some of
the topics the filter matches (an `acl_file` deny rule under a granted `#`). For the clients
client.check_reads names, each message is then checked before it is delivered, as
Mosquitto's `MOSQ_ACL_READ`: client.authorize asked as a SUBSCRIBE of the topic name.

- `identify(session, client)` records who a session's client is (on attach) and asks
  client.check_reads once; `forget(session)` when the session ends. A session whose client
  is not known (restored from the store, not resumed yet) is not checked: its queue is
  re-checked when its client resumes it.
- `may_read(client, topic)` answers from a cache per (client id, user name, topic) (a
  `hooks.decision_cache.DecisionCache` without expiry, the oldest answer dropped when
  full), so a decision is made once per client and topic, not once per delivery.
- `reset()` after plugins reload: the decisions are forgotten and client.check_reads is
  asked again for every known session.
- `version` moves whenever which sessions are checked, or an answer, may have changed: the
  dispatcher rebuilds the plans (`router.fan_out`) it filtered with these answers.
- `active` is False while no session is checked: the publish path then does nothing more.
"""

from __future__ import annotations

from typing import Any

from core.client import ClientInfo
from hooks.decision_cache import DecisionCache
from hooks.events import AuthorizeAction, AuthorizeRequest
from hooks.hook_bus import HookBus

DECISION_CACHE_SIZE = 65536  # (client, topic) answers kept; the oldest goes when full
MAX_CACHED_TOPIC_LENGTH = 512  # longer names are decided each time (hostile names)

_SUBSCRIBE = AuthorizeAction.SUBSCRIBE


class ReadChecks:
    """The per-delivery read checks of one worker's sessions, with their answers cached."""

    __slots__ = (
        "_checked",
        "_decisions",
        "_hooks",
        "_identities",
        "active",
        "version",
    )

    def __init__(self, hooks: HookBus, cache_size: int = DECISION_CACHE_SIZE) -> None:
        self._hooks = hooks
        self._identities: dict[Any, ClientInfo] = {}  # session -> its client, when known
        self._checked: dict[Any, ClientInfo] = {}  # the sessions whose deliveries are checked
        self._decisions: DecisionCache[tuple[str, str | None, str], bool] = DecisionCache(
            max_entries=cache_size
        )
        self.active = False
        self.version = 0

    def identify(self, session: Any, client: ClientInfo) -> None:
        """`client` is now the one of `session` (attached, possibly a new identity)."""
        self._identities[session] = client
        before = self._checked.get(session)
        if self._hooks.checks_reads(client):
            self._checked[session] = client
            changed = before is None or _identity(before) != _identity(client)
        else:
            self._checked.pop(session, None)
            changed = before is not None
        if changed:
            self.version += 1
        self.active = bool(self._checked)

    def forget(self, session: Any) -> None:
        """`session` ended."""
        self._identities.pop(session, None)
        if self._checked.pop(session, None) is not None:
            self.version += 1
            self.active = bool(self._checked)

    def reset(self) -> None:
        """The plugins reloaded: forget every answer and ask client.check_reads again."""
        self._decisions.clear()
        checks_reads = self._hooks.checks_reads
        self._checked = {
            session: client for session, client in self._identities.items() if checks_reads(client)
        }
        self.version += 1
        self.active = bool(self._checked)

    def client_of(self, session: Any) -> ClientInfo | None:
        """The client of `session` if its deliveries are checked, else None."""
        return self._checked.get(session)

    def keeps(self, session: Any, topic: str) -> bool:
        """Whether `session` may be given a message on `topic`."""
        client = self._checked.get(session)
        return client is None or self.may_read(client, topic)

    def may_read(self, client: ClientInfo, topic: str) -> bool:
        """Whether `client` may receive a message on the topic name `topic` (cached)."""
        key = (client.client_id, client.username, topic)
        answer = self._decisions.get(key)
        if answer is None:
            request = AuthorizeRequest(client=client, action=_SUBSCRIBE, topic=topic, qos=0)
            answer = self._hooks.authorize(request)
            if len(topic) <= MAX_CACHED_TOPIC_LENGTH:
                self._decisions.put(key, answer)
        return answer


def _identity(client: ClientInfo) -> tuple[str, str | None]:
    return client.client_id, client.username
