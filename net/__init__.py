"""The socket side of the broker: listeners, one `Connection` per accepted socket (reads,
framing, deadlines, read order), its `Transport` (bounded writes), and the stream layers
that TLS and WebSocket put between the socket and the MQTT bytes. It knows the codec, the
core and the channel's intake, and nothing of the actors: the client actor owns each
connection through the `ConnectionOwner` protocol."""
