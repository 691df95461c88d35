"""Micro-benchmark of the codec's hot paths: `python -m loadtest.bench_codec` prints ns/op.

Cases: decode one 64-byte QoS 0 PUBLISH (3.1.1), encode it, decode a 64 KiB buffer of them
(reported per packet), decode one QoS 1 PUBLISH, encode a PUBACK.
"""

from __future__ import annotations

import argparse
import logging
import timeit
from collections.abc import Callable

from mqtt import PacketDecoder, PubAck, Publish, encode, encode_publish

logger = logging.getLogger("loadtest.bench_codec")

_TOPIC = "sensors/room1/temperature"
_PAYLOAD_64 = b"x" * (64 - 2 - 2 - len(_TOPIC))  # fixed header 2, topic length 2
_QOS0_WIRE = encode_publish(_TOPIC, _PAYLOAD_64, 0, False, False, None, None, 4)
_QOS1_WIRE = encode_publish(_TOPIC, _PAYLOAD_64[2:], 1, False, False, 42, None, 4)
_BATCH_COUNT = 65_536 // len(_QOS0_WIRE)
_BATCH_WIRE = _QOS0_WIRE * _BATCH_COUNT


def _decode_one(wire: bytes) -> Callable[[], object]:
    decoder = PacketDecoder(protocol_version=4)
    return lambda: decoder.feed(wire)


def _encode_qos0() -> Callable[[], object]:
    packet = Publish(_TOPIC, _PAYLOAD_64)
    return lambda: encode(packet, 4)


def _encode_puback() -> Callable[[], object]:
    packet = PubAck(42)
    return lambda: encode(packet, 4)


def _best_ns(operation: Callable[[], object], number: int, per_call: int = 1) -> float:
    """The best of 5 runs, in nanoseconds per item."""
    best = min(timeit.repeat(operation, number=number, repeat=5))
    return best / number / per_call * 1e9


def run(scale: float) -> dict[str, float]:
    """Run every case; `scale` multiplies the iteration counts."""
    many = max(1, int(200_000 * scale))
    return {
        "decode QoS0 PUBLISH 64 B": _best_ns(_decode_one(_QOS0_WIRE), many),
        "encode QoS0 PUBLISH 64 B": _best_ns(_encode_qos0(), many),
        f"decode 64 KiB of QoS0 PUBLISH (per packet, {_BATCH_COUNT}/feed)": _best_ns(
            _decode_one(_BATCH_WIRE), max(1, many // _BATCH_COUNT), _BATCH_COUNT
        ),
        "decode QoS1 PUBLISH": _best_ns(_decode_one(_QOS1_WIRE), many),
        "encode PUBACK": _best_ns(_encode_puback(), many),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="iteration count multiplier")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, nanoseconds in run(args.scale).items():
        logger.info("%-62s %8.0f ns/op", name, nanoseconds)


if __name__ == "__main__":
    main()
