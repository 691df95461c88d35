"""The link between the broker's workers (and, later, between brokers on several machines).

`frames` is the pure codec of everything workers tell each other; `ownership` decides which
worker owns each client id. See docs/pool.md.
"""
