"""The pure per-connection MQTT protocol: packets in, actions out (see docs/channel.md).

`channel.channel.Channel` owns a connection's phases, CONNECT validation, the keep-alive
deadline, the will and every acknowledgement; its parts are `channel.base` (state, batch,
closing), `channel.connect`, `channel.publish_intake` and `channel.subscriptions`, and
`channel.pubacks` chooses every PUBACK/PUBREC code and builds its bytes. `channel.actions`
is the vocabulary it answers in. Nothing here does I/O or uses the actor runtime: the client
and session actors carry the actions out, and tests drive the channel in-process.
"""
