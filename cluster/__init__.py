"""The cluster: brokers on several machines acting as one, over NATS (docs/cluster.md).
`config` reads `[cluster]`; `nats_link` runs the NATS client on an asyncio loop of its own;
`fabric` is the pool's `Fabric` over it, between this worker and the other nodes' workers;
`member` replicates routes and forwards publishes over that fabric, and `joined` joins it
with the pool's own forwarding."""
