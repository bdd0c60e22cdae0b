"""The Fiat–Shamir transcript: SHA-256 over everything the prover sends.

Every message is absorbed with a label and its length. A challenge is
squeezed as SHAKE-256 output keyed by the current state, then absorbed
back, so later challenges depend on earlier ones. A field challenge is a
51-bit word, redrawn when it is not below ``p``, so it is exactly uniform.
Column indices are distinct. They are drawn by rejection from 4-byte
samples below the largest multiple of ``n``.
"""
from __future__ import annotations

import hashlib
import struct

import numpy as np

from ...circuits import gf

__all__ = ["Transcript"]


class Transcript:
    def __init__(self, protocol: bytes):
        self._state = hashlib.sha256(b"circuitgrad-ligero-transcript:" + protocol).digest()

    def absorb(self, label: str, data: bytes) -> None:
        lb = label.encode()
        self._state = hashlib.sha256(self._state + struct.pack("<I", len(lb)) + lb
                                     + struct.pack("<Q", len(data)) + data).digest()

    def _squeeze(self, label: str, nbytes: int) -> bytes:
        out = hashlib.shake_256(self._state + b"squeeze:" + label.encode()).digest(nbytes)
        self.absorb("challenge:" + label, struct.pack("<Q", nbytes))
        return out

    def field(self, label: str, count: int) -> np.ndarray:
        """``count`` uniform field elements."""
        if count == 0:
            self.absorb("challenge:" + label, b"")
            return np.zeros(0, dtype=np.int64)
        out = np.zeros(0, dtype=np.int64)
        round_ = 0
        while len(out) < count:                 # 51-bit words below p: exactly uniform, 1 in 5000 rejected
            want = count - len(out)
            raw = np.frombuffer(self._squeeze(f"{label}#{round_}", 8 * (want + 16 + want // 1024)), dtype="<u8")
            v = (raw & np.uint64((1 << 51) - 1)).astype(np.int64)
            out = np.concatenate([out, v[v < gf.P][:want]])
            round_ += 1
        return out

    def indices(self, label: str, count: int, n: int) -> list[int]:
        """``count`` distinct uniform indices in ``[0, n)``."""
        if count > n:
            raise ValueError(f"cannot open {count} distinct columns out of {n}")
        limit = (1 << 32) // n * n
        out, seen, round_ = [], set(), 0
        while len(out) < count:
            raw = np.frombuffer(self._squeeze(f"{label}#{round_}", 4 * 2 * count), dtype="<u4")
            for v in raw.tolist():
                if v < limit and v % n not in seen:
                    seen.add(v % n)
                    out.append(v % n)
                    if len(out) == count:
                        break
            round_ += 1
        return out
