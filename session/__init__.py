"""The pure session protocol: what a session decides, answered as actions (docs/channel.md).

`session.protocol.SessionProtocol` owns one client id's `core.session_state.SessionState`
and decides everything the MQTT protocol asks of a session: the CONNACK's session present,
the resends on resume, the PUBLISH/PUBREL encodings, PUBREC and PUBCOMP of the incoming
QoS 2 flow, SUBACK/UNSUBACK reason codes, and what is written to the store.
`session.takeovers` decides what a takeover waits for. `session.actions` is the vocabulary
they answer in. Nothing here does I/O or uses the actor runtime: the session actor
(`actors.session_actor`) carries the actions out, and tests drive the protocol in-process.
"""
