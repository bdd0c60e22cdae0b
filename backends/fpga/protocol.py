"""The framed protocol of the UART host port: what the driver (:mod:`.board`) and the gateware (:mod:`.link`)
both speak. Pure Python, no Amaranth.

A request, host to board::

    A5 | cmd | addr (3 bytes) | count (2 bytes) | count words (write only) | check

A reply, board to host::

    5A | status | count words (R), or cycles (4 bytes) and fault (2 bytes: the first overflowing micro-op) (S, F) | check

Multi-byte fields are big-endian; a word is ``ceil(W / 8)`` bytes of its two's complement. ``check`` makes
the bytes after the sync byte sum to 0 modulo 256. The commands:

* ``W`` writes ``count`` words from ``addr`` on;
* ``R`` reads ``count`` words from ``addr`` on;
* ``S`` starts the program and replies when it is done, with the cycles it took;
* ``F`` replies as ``S`` does for the last run, without running (zeros before any run).

The status byte's bits are :data:`OK`, :data:`BAD_CHECK`, :data:`BAD_COMMAND` and :data:`OVERFLOW` (the
program overflowed its format); a refused frame has only ``status`` between sync and check. The board writes a
``W`` frame's words as they arrive: a frame whose check fails has been written in part, and the driver sends
it again. A frame cut short is dropped after :data:`TIMEOUT_BITS` bit times without a byte, so a lost byte
costs a retry, never the next frame's bytes.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

__all__ = ["DEFAULT_BAUD", "TIMEOUT_BITS", "REQUEST", "REPLY", "WRITE", "READ", "START", "FLAGS", "OK", "BAD_CHECK", "BAD_COMMAND", "OVERFLOW",
           "MAX_COUNT", "MAX_ADDR", "word_bytes", "check", "request", "encode_words", "decode_words",
           "describe_status", "ProtocolError"]

#: the boards' rate: 1 Mbaud divides both the iCEBreaker's 12 MHz and the ULX3S's 25 MHz clock exactly
DEFAULT_BAUD = 1_000_000
REQUEST, REPLY = 0xA5, 0x5A
#: bit times without a byte after which the board drops a request it was receiving (four bytes' time)
TIMEOUT_BITS = 40
WRITE, READ, START, FLAGS = ord("W"), ord("R"), ord("S"), ord("F")
OK, BAD_CHECK, BAD_COMMAND, OVERFLOW = 0x01, 0x02, 0x04, 0x08
MAX_COUNT = 0xFFFF
MAX_ADDR = 0xFFFFFF


class ProtocolError(RuntimeError):
    """A reply that is not what the protocol allows (a lost byte, a wrong check, a status that is not OK)."""


def word_bytes(width: int) -> int:
    """Bytes per word of ``width`` bits."""
    return -(-width // 8)


def check(body: Iterable[int]) -> int:
    """The byte that makes ``body`` plus itself sum to 0 modulo 256."""
    return -sum(body) & 0xFF


def encode_words(words, width: int) -> bytes:
    """``words`` (integers of ``width`` signed bits) as big-endian two's complement, ``word_bytes`` each."""
    w = np.asarray(words, dtype=np.int64).reshape(-1)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if w.size and (w.min() < lo or w.max() > hi):
        raise ValueError(f"protocol: a word is outside {width} signed bits [{lo}, {hi}]")
    n = word_bytes(width)
    u = (w & ((1 << (8 * n)) - 1)).astype(np.uint64)
    return b"".join(int(v).to_bytes(n, "big") for v in u)


def decode_words(data: bytes, width: int) -> np.ndarray:
    """Words of ``width`` signed bits from their big-endian bytes (sign-extended)."""
    n = word_bytes(width)
    if len(data) % n:
        raise ProtocolError(f"protocol: {len(data)} bytes are not a whole number of {n}-byte words")
    raw = np.array([int.from_bytes(data[i:i + n], "big") for i in range(0, len(data), n)], dtype=np.int64)
    raw &= (1 << width) - 1
    return np.where(raw >= 1 << (width - 1), raw - (1 << width), raw)


def request(cmd: int, addr: int = 0, count: int = 0, payload: bytes = b"") -> bytes:
    """One request frame."""
    if not 0 <= addr <= MAX_ADDR or not 0 <= count <= MAX_COUNT:
        raise ValueError(f"protocol: address {addr} or count {count} out of range (at most {MAX_ADDR}, {MAX_COUNT})")
    body = bytes([cmd]) + addr.to_bytes(3, "big") + count.to_bytes(2, "big") + payload
    return bytes([REQUEST]) + body + bytes([check(body)])


def describe_status(status: int) -> str:
    """The status bits in words."""
    names = [n for bit, n in ((OK, "ok"), (BAD_CHECK, "bad check"), (BAD_COMMAND, "bad command"),
                              (OVERFLOW, "overflow")) if status & bit]
    return ", ".join(names) or f"no bits set (0x{status:02x})"
