"""MQTT bridges: topics forwarded to and from other MQTT brokers (docs/bridges.md).

Pure parts: `config` (the `[[bridges]]` tables), `topics` (Mosquitto's topic lines),
`backoff` (addresses tried in turn, waits between rounds), `relay` (packets between the
bridge's local session and the remote broker). I/O: `remote` (the socket to the remote
broker, TCP or TLS), `link` (one MQTT client connection over a socket), `local_link` (the
in-process connection to this broker), `runner` (one bridge's life), `service` (the
broker's bridges).
"""
