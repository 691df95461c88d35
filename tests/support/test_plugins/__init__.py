"""Small plugins loaded only by the integration tests (through `[[plugins]] module = ...`).

The broker subprocess runs from the repository root, so `tests.support.test_plugins.<name>`
is importable there. Each module is a complete plugin in the sense of docs/plugins.md:
`raising` fails in every callback, `recorder` writes every hook event to a JSON-lines file,
`topic_rewrite` / `topic_drop` act on message.publish at a configured priority, and
`stop_connected` halts the client.connected chain for some clients. This package itself has
no `Plugin` class, which the loading tests rely on.
"""
