"""The frames workers exchange over the fabric: pure bytes <-> frame objects, no I/O.

One module per subsystem holds its frames (`peers`, `routes`, `forwarding`, `ownership`,
`moves`, `operations`, `admission`, `flow`, `store`); `codec` numbers their kinds and turns
them into bytes and back (`encode_frame`, `FrameDecoder`), with the binary message part of
the frames that carry messages in `message_part` and the checks a peer's bytes pass in
`validation`. Nothing is pickled and no actor reference crosses a link: a peer may be
another process or, later, another machine (docs/pool.md).
"""
