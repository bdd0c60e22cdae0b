"""The iden3 binary formats, written and read from their specifications.

* ``.r1cs`` version 1 (github.com/iden3/r1csfile, ``doc/r1cs_bin_format.md``):
  ``"r1cs"``, version u32, a section count u32, then sections ``(type u32,
  size u64, body)``. Section 1 is the header: ``n8 u32``, the prime
  (``n8`` bytes, little endian), ``nWires``, ``nPubOut``, ``nPubIn``,
  ``nPrvIn`` as u32, ``nLabels`` u64, ``mConstraints`` u32. Section 2 holds
  the constraints: for each constraint, for A, B and C, ``nTerms`` u32 and
  then ``(wireId u32, coeff n8 bytes)`` per term. Section 3 maps wires to
  labels (one u64 label per wire). Field elements are in standard form (not
  Montgomery), little endian.
* ``.wtns`` version 2 (as written by circom's witness calculators and read
  by snarkjs): ``"wtns"``, version 2, 2 sections. Section 1 holds
  ``n8 u32``, the prime and ``nWitness u32``. Section 2 holds the values,
  ``n8`` bytes each.
* ``.sym``: text, one line per wire: ``labelId,wireId,componentId,name``.

Writers are vectorised. Repeated coefficients are encoded once, and the
terms are scattered into one ``uint8`` buffer. Readers validate every size
and raise :class:`FormatError` with the file name and what is wrong.
"""
from __future__ import annotations

import json
import os
import stat
import struct
from typing import BinaryIO

import numpy as np

from .field import Field
from .r1cs import R1CS

__all__ = ["FormatError", "write_r1cs", "read_r1cs_header", "write_wtns", "read_wtns", "write_sym",
           "field_bytes", "read_untrusted", "open_untrusted", "printable", "MAX_FILE", "json_loads", "DuplicateKey"]

#: the largest file an untrusted reader reads (bytes)
MAX_FILE = 256 << 20


class FormatError(ValueError):
    """A corrupt, truncated or mismatched file."""


def printable(text: str) -> str:
    """``text`` with control characters escaped, so that data from a file cannot drive the terminal."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def read_untrusted(path: str, limit: int = MAX_FILE, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, else :class:`FormatError`.

    Symbolic links, directories, FIFOs and devices are refused without reading (opened non-blocking,
    so a FIFO cannot hang the reader), and so is anything larger than ``limit``.
    """
    name = printable(str(path))
    fh, size = open_untrusted(path, limit, what)
    with fh:
        data = fh.read(size + 1)           # not limit + 1: the buffer is allocated at that size
        if len(data) > size:               # the file grew since fstat
            data += fh.read(limit + 1 - len(data))
    if len(data) > limit:
        raise FormatError(f"{name}: more than a {what} may have ({limit} bytes)")
    return data


def open_untrusted(path: str, limit: int | None = MAX_FILE, what: str = "file") -> tuple[BinaryIO, int]:
    """A regular file of at most ``limit`` bytes (``None``: any size, for a caller that reads only its start)
    opened for reading, and its size, else :class:`FormatError` (the checks of :func:`read_untrusted`, which
    reads it whole)."""
    name = printable(str(path))
    if os.path.islink(path):
        raise FormatError(f"{name}: a symbolic link; a {what} must be a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))   # a link swapped in: ELOOP
    except FileNotFoundError:
        raise FormatError(f"{name}: no such {what}") from None
    except OSError as e:
        raise FormatError(f"{name}: cannot read: {e.strerror}") from None
    try:                                   # checked on the descriptor, which is closed on every path
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FormatError(f"{name}: a directory; a {what} must be a regular file")
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"{name}: not a regular file; a {what} must be one")
        if limit is not None and st.st_size > limit:
            raise FormatError(f"{name}: {st.st_size} bytes, more than a {what} may have ({limit})")
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return fh, st.st_size


class DuplicateKey(ValueError):
    """A JSON object names a key twice (``json.loads`` would silently keep the last value)."""


def _unique_pairs(pairs: list) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"duplicate key {printable(key)[:80]!r}: each key may appear once")
        out[key] = value
    return out


def json_loads(text: str | bytes):
    """``json.loads`` for untrusted text: an object that names a key twice raises :class:`DuplicateKey`
    (a ``ValueError``, as malformed JSON does), so that one file cannot mean two things to two readers."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def field_bytes(values, fld: Field) -> np.ndarray:
    """``(n, n8)`` little-endian bytes of the canonical representatives of signed integers."""
    v = np.asarray(values).reshape(-1)
    if v.dtype != object:
        u, inv = np.unique(v.astype(np.int64), return_inverse=True)
        uniq = [int(x) for x in u]
    else:
        seen: dict[int, int] = {}
        inv = np.fromiter((seen.setdefault(int(x), len(seen)) for x in v), dtype=np.int64, count=len(v))
        uniq = list(seen)
    n8 = fld.n8
    table = np.frombuffer(b"".join((x % fld.p).to_bytes(n8, "little") for x in uniq), dtype=np.uint8)
    return table.reshape(len(uniq), n8)[np.asarray(inv, dtype=np.int64).reshape(-1)]


def _section(kind: int, body: bytes) -> bytes:
    return struct.pack("<IQ", kind, len(body)) + body


def write_r1cs(path: str, r: R1CS) -> None:
    """Write ``r`` as an iden3 ``.r1cs`` (version 1); refuses a system with lookups (the format has none)."""
    if r.L is not None:
        raise ValueError(f"write_r1cs: this system proves its ranges with {r.n_lookups} lookups, which the "
                         f".r1cs format cannot express; compile with zk.compile(..., range_checks='bits')")
    if r.contractions:
        raise ValueError(f"write_r1cs: this system proves {len(r.contractions)} matrix products by the native "
                         f"prover's contraction argument, which the .r1cs format cannot express; compile with "
                         f"zk.compile(..., contractions='mac')")
    fld, n8 = r.field, r.field.n8
    header = struct.pack("<I", n8) + fld.p.to_bytes(n8, "little") + struct.pack(
        "<IIIIQI", r.n_wires, r.n_pub_out, r.n_pub_in, r.n_prv_in, r.n_wires, r.n_constraints)
    # constraint section: per constraint, A B C blocks of (u32 count, terms of 4 + n8 bytes)
    m = r.n_constraints
    counts = np.stack([np.diff(M.ptr) for M in (r.A, r.B, r.C)], axis=1)          # (m, 3)
    rec = 4 + n8
    block_sizes = 4 + counts * rec
    starts = np.zeros(3 * m + 1, dtype=np.int64)
    np.cumsum(block_sizes.reshape(-1), out=starts[1:])
    buf = np.zeros(int(starts[-1]), dtype=np.uint8)
    heads = starts[:-1]
    buf[heads[:, None] + np.arange(4)] = counts.reshape(-1).astype("<u4").view(np.uint8).reshape(-1, 4)
    for j, M in enumerate((r.A, r.B, r.C)):
        if len(M.wires) == 0:
            continue
        row_of = np.repeat(np.arange(m), np.diff(M.ptr))
        pos_in_row = np.arange(len(M.wires)) - M.ptr[row_of]
        off = heads.reshape(m, 3)[row_of, j] + 4 + pos_in_row * rec
        recs = np.concatenate([M.wires.astype("<u4").view(np.uint8).reshape(-1, 4), field_bytes(M.coeffs, fld)],
                              axis=1)
        buf[off[:, None] + np.arange(rec)] = recs
    labels = np.arange(r.n_wires, dtype="<u8").tobytes()
    with open(path, "wb") as fh:
        fh.write(b"r1cs" + struct.pack("<II", 1, 3))
        fh.write(_section(1, header))
        fh.write(_section(2, buf.tobytes()))
        fh.write(_section(3, labels))


def _read_sections(path: str, magic: bytes) -> tuple[int, dict[int, bytes]]:
    name = os.path.basename(path)
    data = read_untrusted(path, what=f"{magic.decode()} file")
    if len(data) < 12 or data[:4] != magic:
        raise FormatError(f"{name}: not a {magic.decode()} file (bad magic or too short)")
    version, n = struct.unpack_from("<II", data, 4)
    pos, sections = 12, {}
    for i in range(n):
        if pos + 12 > len(data):
            raise FormatError(f"{name}: truncated: section {i + 1} of {n} header is missing")
        kind, size = struct.unpack_from("<IQ", data, pos)
        pos += 12
        if pos + size > len(data):
            raise FormatError(f"{name}: truncated: section {kind} claims {size} bytes, {len(data) - pos} remain")
        sections[kind] = data[pos:pos + size]
        pos += size
    if pos != len(data):
        raise FormatError(f"{name}: {len(data) - pos} unexpected trailing bytes")
    return version, sections


def _field_header(path: str, magic: bytes, version: int, tail: int) -> tuple:
    """Open an iden3 file: ``(name, sections, n8, prime, rest)``, where header section 1 is
    ``n8 (u32) ‖ prime (n8 bytes) ‖ rest (tail bytes)``; the version and sizes are checked."""
    name = os.path.basename(path)
    found, sec = _read_sections(path, magic)
    if found != version:
        raise FormatError(f"{name}: unsupported {magic.decode()} version {found} (expected {version})")
    h = sec.get(1)
    if h is None or len(h) < 4:
        raise FormatError(f"{name}: header section missing or short")
    n8 = struct.unpack_from("<I", h)[0]
    if len(h) != 4 + n8 + tail:
        raise FormatError(f"{name}: header section has {len(h)} bytes, expected {4 + n8 + tail}")
    return name, sec, n8, int.from_bytes(h[4:4 + n8], "little"), h[4 + n8:]


def read_r1cs_header(path: str) -> dict:
    """The header of an ``.r1cs`` file (validated)."""
    name, sec, n8, prime, rest = _field_header(path, b"r1cs", 1, 28)
    nw, no, ni, npv, nl, m = struct.unpack("<IIIIQI", rest)
    if 2 not in sec:
        raise FormatError(f"{name}: constraint section missing")
    return {"n8": n8, "prime": prime, "n_wires": nw, "n_pub_out": no, "n_pub_in": ni, "n_prv_in": npv,
            "n_labels": nl, "n_constraints": m}


def write_wtns(path: str, values, fld: Field) -> None:
    """Write witness ``values`` (signed integers, ``values[0] = 1``) as ``.wtns`` version 2."""
    n8 = fld.n8
    head = struct.pack("<I", n8) + fld.p.to_bytes(n8, "little") + struct.pack("<I", len(values))
    with open(path, "wb") as fh:
        fh.write(b"wtns" + struct.pack("<II", 2, 2))
        fh.write(_section(1, head))
        fh.write(_section(2, field_bytes(values, fld).tobytes()))


def read_wtns(path: str, fld: Field | None = None) -> list[int]:
    """Witness values of a ``.wtns`` file (validated; checked against ``fld`` when given)."""
    name, sec, n8, prime, rest = _field_header(path, b"wtns", 2, 4)
    (n,) = struct.unpack("<I", rest)
    if fld is not None and prime != fld.p:
        raise FormatError(f"{name}: witness is over a different field (prime {prime}, expected {fld.p})")
    body = sec.get(2, b"")
    if len(body) != n * n8:
        raise FormatError(f"{name}: values section has {len(body)} bytes, expected {n} × {n8}")
    vals = [int.from_bytes(body[i * n8:(i + 1) * n8], "little") for i in range(n)]
    if any(v >= prime for v in vals):
        raise FormatError(f"{name}: a value is not reduced modulo the prime")
    return vals


def write_sym(path: str, r: R1CS) -> None:
    """Write ``.sym``: ``labelId,wireId,componentId,name`` per wire (names like ``main.W0[3]``)."""
    lines = []
    names = {}
    for start, n, name in r.wire_names:
        for i in range(n):
            names[start + i] = name if n == 1 else f"{name}[{i}]"
    for wire in range(1, r.n_wires):
        lines.append(f"{wire},{wire},0,main.{names.get(wire, f'aux[{wire}]')}")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
