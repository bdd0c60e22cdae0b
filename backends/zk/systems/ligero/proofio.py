"""Native Ligero proofs (:class:`LigeroProof`) and their ``.proof`` file format (version 1; 2 with lookups; 3
with contractions).

All integers are little-endian::

    magic    8 bytes   b"CGLIGERO"
    version  u16       1
    hlen     u32       header length
    header   hlen      UTF-8 JSON (sorted keys): protocol, field, hash, k, t, n, sigma,
                       circuit_sha256, n_public, public_outputs, statement, and
                       soundness ("classic") only for parameters chosen for the classic bound
    public   n_public × u64            z[1 : 1 + n_public] in [0, p)
    root     32 bytes                  Merkle root of the columns
    u        σ·K × u64                 proximity polynomials
    q        σ·(K + k − 1) × u64       linear-test polynomials
    h        σ·(2K − 1 − k) × u64      quadratic-test quotients
    rows     u32                       rows of the committed matrix
    columns  rows·t × u64              opened columns (row-major)
    salts    t × 16 bytes
    nsib     u32                       Merkle siblings
    siblings nsib × 32 bytes
    check    32 bytes                  SHA-256 of everything above

Version 2 is written for circuits with lookups (:mod:`.lookup`). Its header
has three more keys, ``lookups``, ``lookup_sigma`` and ``lookup_table`` (the
entries of the circuit's tables together), and the second commitment
follows the siblings (before ``check``)::

    root2     32 bytes                 Merkle root of the lookup commitment
    rows2     u32                      its rows (σL·(mv + mm))
    columns2  rows2·t × u64            its opened columns (the same t columns)
    salts2    t × 16 bytes
    nsib2     u32
    siblings2 nsib2 × 32 bytes

Version 3 is written for circuits with contractions (:mod:`.contraction`),
with or without lookups. Its header has the keys ``contraction_cells`` and
``contraction_sigma``, and the three lookup keys exactly when the
circuit has lookups; the second commitment follows as in version 2 and holds
the lookup rows (if any), then the ``3·σC·mx`` contraction rows.

The header is also absorbed into the Fiat–Shamir transcript, so it cannot
be altered without invalidating the proof. :func:`load` rejects every
malformed, truncated, extended or corrupted file with a :class:`FormatError`
that says what is wrong.
"""
from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

from dataclasses import dataclass, field

from ...circuits import gf
from ...circuits.formats import MAX_FILE, FormatError, json_loads, open_untrusted, printable, read_untrusted
from ...circuits.tables import MAX_FUNCTION_TABLES, MAX_TABLE_BITS
from . import merkle
from .params import DEFAULT_SOUNDNESS, SOUNDNESS, TABLE, Params, soundness_bits

#: the most table entries a proof may claim: every range table, and every function table at 2^22 entries
MAX_LOOKUP_TABLE = (1 << (MAX_TABLE_BITS + 1)) + (MAX_FUNCTION_TABLES << MAX_TABLE_BITS)

__all__ = ["LigeroProof", "PROTOCOL", "RETIRED", "save", "load", "claimed_soundness", "dumps", "loads", "max_bytes", "MAGIC", "VERSION"]

PROTOCOL = "circuitgrad-ligero-r1cs-v5"      # v2: lookup tables per width, the contraction argument;
#                                              v3: the linear test's coefficients in rank-one blocks;
#                                              v4: domain-separated Merkle leaves and nodes;
#                                              v5: column leaves over blocks of rows, the tests' challenges together
#: earlier protocol names, refused by name (what the next version changed)
RETIRED = {
    "circuitgrad-ligero-r1cs-v1": "one lookup table for every width, no contraction argument",
    "circuitgrad-ligero-r1cs-v2": "linear-test coefficients drawn independently",
    "circuitgrad-ligero-r1cs-v3": "Merkle hashing without domain tags",
    "circuitgrad-ligero-r1cs-v4": "column leaves over whole columns, each test's challenges after the previous response",
}


@dataclass
class LigeroProof:
    """A native transparent proof (:mod:`.protocol` makes and checks it); its file format is this module's."""
    params: Params
    circuit_digest: bytes
    public: np.ndarray              # z[1 : 1 + n_public] in [0, p)
    public_outputs: int
    statement: str
    root: bytes
    u: np.ndarray                   # (σ, K)
    q: np.ndarray                   # (σ, K + k − 1)
    h: np.ndarray                   # (σ, 2K − 1 − k)
    columns: np.ndarray             # (rows, t) opened column values
    salts: list                     # t × 16 bytes
    siblings: list                  # Merkle siblings (32 bytes each)
    timings: dict = field(default_factory=dict)
    system: str = "ligero"
    lookups: int = 0                # the circuit's lookups; with lookups or contractions, the second commitment:
    lookup_table: int = 0           # |T|: the entries of the circuit's lookup tables (with lookups)
    root2: bytes = b""
    columns2: np.ndarray | None = None   # (σL·(mv + mm) + 3·σC·mx, t)
    salts2: list = field(default_factory=list)
    siblings2: list = field(default_factory=list)
    contractions: int = 0           # the cells N of each Freivalds vector (0: the circuit has no contractions)

    @property
    def second_round(self) -> bool:
        """Whether the proof has a second commitment (lookups or contractions)."""
        return bool(self.lookups or self.contractions)

    def header(self) -> dict:
        """The header that the file format stores and the transcript absorbs."""
        p = self.params
        head = {"protocol": PROTOCOL, "field": str(gf.P), "hash": merkle.HASH, "k": p.k, "t": p.t, "n": p.n,
                "sigma": p.sigma, "circuit_sha256": self.circuit_digest.hex(), "n_public": int(len(self.public)),
                "public_outputs": int(self.public_outputs), "statement": self.statement}
        if self.lookups:
            head.update(lookups=int(self.lookups), lookup_sigma=p.lookup_sigma, lookup_table=int(self.lookup_table))
        if self.contractions:
            head.update(contraction_cells=int(self.contractions), contraction_sigma=p.contraction_sigma)
        if p.soundness != DEFAULT_SOUNDNESS:        # absent: the default analysis (files stay as they were)
            head["soundness"] = p.soundness
        return head

    @property
    def soundness_bits(self) -> float:
        return soundness_bits(self.params, lookups=self.lookups, contractions=self.contractions,
                              table=self.lookup_table or TABLE)

    def save(self, path: str) -> None:
        save(self, path)

    @classmethod
    def load(cls, path: str) -> "LigeroProof":
        return load(path)


MAGIC = b"CGLIGERO"
VERSION = 3
_KEYS = {"protocol": str, "field": str, "hash": str, "k": int, "t": int, "n": int, "sigma": int,
         "circuit_sha256": str, "n_public": int, "public_outputs": int, "statement": str}
_KEYS2 = dict(_KEYS, lookups=int, lookup_sigma=int, lookup_table=int)
_KEYS3 = dict(_KEYS, contraction_cells=int, contraction_sigma=int)


def _version(proof: LigeroProof) -> int:
    return 3 if proof.contractions else 2 if proof.lookups else 1


def dumps(proof: LigeroProof) -> bytes:
    head = json.dumps(proof.header(), sort_keys=True).encode()
    parts = [MAGIC, struct.pack("<HI", _version(proof), len(head)), head,
             np.ascontiguousarray(proof.public, dtype="<u8").tobytes(), proof.root]
    parts += [np.ascontiguousarray(a, dtype="<u8").tobytes() for a in (proof.u, proof.q, proof.h)]
    parts += [struct.pack("<I", proof.columns.shape[0]), np.ascontiguousarray(proof.columns, dtype="<u8").tobytes()]
    parts += _openings(proof.salts, proof.siblings)
    if proof.second_round:
        parts += [proof.root2, struct.pack("<I", proof.columns2.shape[0]),
                  np.ascontiguousarray(proof.columns2, dtype="<u8").tobytes()]
        parts += _openings(proof.salts2, proof.siblings2)
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


def _openings(salts: list, siblings: list) -> list:
    """The salts, the sibling count and the Merkle siblings of one commitment's opened columns."""
    return list(salts) + [struct.pack("<I", len(siblings))] + list(siblings)


def save(proof: LigeroProof, path: str) -> None:
    with open(path, "wb") as fh:
        fh.write(dumps(proof))


class _Reader:
    def __init__(self, data: bytes, name: str):
        self.data, self.pos, self.name = data, 0, name

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise FormatError(f"{self.name}: truncated in {what} (needs {n} bytes at offset {self.pos}, "
                              f"file has {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def openings(self, p: Params, what: str) -> tuple[list, list]:
        """One commitment's ``t`` salts and its Merkle siblings (at most as many as ``t`` openings need)."""
        salts = [self.take(16, f"{what}salts") for _ in range(p.t)]
        (nsib,) = struct.unpack("<I", self.take(4, f"{what}sibling count"))
        if nsib > p.t * p.n.bit_length():
            raise FormatError(f"{self.name}: {nsib} Merkle siblings is more than {p.t} openings can need")
        return salts, [self.take(32, f"{what}Merkle siblings") for _ in range(nsib)]

    def field(self, count: int, what: str) -> np.ndarray:
        a = np.frombuffer(self.take(8 * count, what), dtype="<u8")
        if a.size and int(a.max()) >= gf.P:
            raise FormatError(f"{self.name}: {what} holds a value that is not a field element (≥ p)")
        return a.astype(np.int64)


def loads(data: bytes, name: str = "proof") -> LigeroProof:
    """Parse and validate a proof (see the module docstring); raises :class:`FormatError`."""
    if len(data) < len(MAGIC) + 6 + 32:
        raise FormatError(f"{name}: too short to be a circuitgrad Ligero proof ({len(data)} bytes)")
    if data[:8] != MAGIC:
        raise FormatError(f"{name}: not a circuitgrad Ligero proof (bad magic)")
    body, check = data[:-32], data[-32:]
    r = _Reader(body, name)
    r.take(8, "magic")
    version, hlen = struct.unpack("<HI", r.take(6, "version"))
    if version not in (1, 2, VERSION):
        raise FormatError(f"{name}: proof format version {version} is not supported (this reads versions 1 "
                          f"to {VERSION})")
    if hashlib.sha256(body).digest() != check:
        raise FormatError(f"{name}: checksum mismatch: the file is corrupted or was modified")
    raw = r.take(hlen, "header")
    try:
        head = json_loads(raw.decode())
    except (ValueError, RecursionError) as e:        # bad UTF-8 or JSON, huge integers, deep nesting
        raise FormatError(f"{name}: header is not valid JSON ({printable(str(e))[:200]})") from None
    keys = {1: _KEYS, 2: _KEYS2, 3: _KEYS3}[version]
    if version == 3 and isinstance(head, dict) and ({"lookups", "lookup_sigma", "lookup_table"} & set(head)):
        keys = dict(keys, lookups=int, lookup_sigma=int, lookup_table=int)   # all or none (the exact key set below)
    if isinstance(head, dict) and "soundness" in head:      # optional: absent for the default analysis
        keys = dict(keys, soundness=str)
    if not isinstance(head, dict) or set(head) != set(keys):
        raise FormatError(f"{name}: a version {version} header must have exactly the keys {sorted(keys)}")
    for key, typ in keys.items():
        if not isinstance(head[key], typ) or isinstance(head[key], bool):
            raise FormatError(f"{name}: header field {key!r} must be {typ.__name__}")
    if head["protocol"] in RETIRED:
        raise FormatError(f"{name}: proof format {head['protocol']} ({RETIRED[head['protocol']]}) is no longer "
                          f"accepted: re-prove with this version ({PROTOCOL})")
    if head["protocol"] != PROTOCOL:
        raise FormatError(f"{name}: protocol {head['protocol'][:80]!r} is not {PROTOCOL!r}")
    if head["field"] != str(gf.P):
        raise FormatError(f"{name}: proof is over the field {head['field'][:80]!r}, this prover's is {gf.P}")
    if head["hash"] != "sha256":
        raise FormatError(f"{name}: hash {head['hash'][:80]!r} is not supported")
    lookups, sl = (head["lookups"], head["lookup_sigma"]) if "lookups" in keys else (0, 0)
    if "lookups" in keys and not (lookups > 0 and sl > 0):
        raise FormatError(f"{name}: a proof with lookups must have lookups and lookup_sigma ≥ 1")
    table = head["lookup_table"] if "lookups" in keys else 0
    if "lookups" in keys and not 2 <= table <= MAX_LOOKUP_TABLE:
        raise FormatError(f"{name}: lookup_table must count 2 to {MAX_LOOKUP_TABLE} table entries")
    cells, sc = (head["contraction_cells"], head["contraction_sigma"]) if version == 3 else (0, 0)
    if version == 3 and not (cells > 0 and sc > 0):
        raise FormatError(f"{name}: a version 3 proof must have contraction_cells and contraction_sigma ≥ 1")
    if head.get("soundness", "classic") not in SOUNDNESS[1:]:
        raise FormatError(f"{name}: header field 'soundness' must be one of {list(SOUNDNESS[1:])} "
                          f"(absent for the default, {DEFAULT_SOUNDNESS!r})")
    p = Params(head["k"], head["t"], head["n"], head["sigma"], sl, head.get("soundness", DEFAULT_SOUNDNESS), sc)
    try:
        p.validate()
    except ValueError as e:
        raise FormatError(f"{name}: {e}") from None
    try:
        digest = bytes.fromhex(head["circuit_sha256"])
    except ValueError:
        digest = b""
    if len(digest) != 32 or digest.hex() != head["circuit_sha256"]:
        raise FormatError(f"{name}: circuit_sha256 must be 64 lowercase hex digits")
    if json.dumps(head, sort_keys=True).encode() != raw:
        raise FormatError(f"{name}: the header is not in its canonical form (json.dumps(header, sort_keys=True), "
                          f"as zk writes it): a proof has exactly one encoding")
    npub = head["n_public"]
    if npub < 0 or not 0 <= head["public_outputs"] <= npub:
        raise FormatError(f"{name}: bad public value counts")
    public = r.field(npub, "public values")
    root = r.take(32, "Merkle root")
    u = r.field(p.sigma * p.K, "proximity polynomials").reshape(p.sigma, p.K)
    q = r.field(p.sigma * p.lin_len, "linear-test polynomials").reshape(p.sigma, p.lin_len)
    h = r.field(p.sigma * p.quad_len, "quadratic-test quotients").reshape(p.sigma, p.quad_len)
    (rows,) = struct.unpack("<I", r.take(4, "row count"))
    if rows <= 3 * p.sigma:
        raise FormatError(f"{name}: {rows} committed rows cannot hold a witness and {3 * p.sigma} masks")
    columns = r.field(rows * p.t, "opened columns").reshape(rows, p.t)
    salts, siblings = r.openings(p, "")
    proof = LigeroProof(p, digest, public, head["public_outputs"], head["statement"], root, u, q, h, columns,
                        salts, siblings, lookups=lookups, contractions=cells, lookup_table=table)
    if proof.second_round:
        proof.root2 = r.take(32, "lookup Merkle root")
        (rows2,) = struct.unpack("<I", r.take(4, "lookup row count"))
        if rows2 < 2 * sl + 3 * sc:
            raise FormatError(f"{name}: {rows2} second-round rows cannot hold {sl} lookup challenges' inverses "
                              f"and table terms and {sc} contraction draws")
        proof.columns2 = r.field(rows2 * p.t, "opened lookup columns").reshape(rows2, p.t)
        proof.salts2, proof.siblings2 = r.openings(p, "lookup ")
    if r.pos != len(body):
        raise FormatError(f"{name}: {len(body) - r.pos} unexpected bytes after the proof")
    return proof


def load(path: str, limit: int = MAX_FILE, soundness: str | None = None) -> LigeroProof:
    """Read and validate a proof file (a regular file of at most ``limit`` bytes; a verifier passes
    :func:`max_bytes` of the parameters it expects, so that a file cannot cost more than an honest proof).

    ``soundness``: the analysis the verifier requires (the one ``limit`` was computed for). A proof whose header
    claims another one is refused first, by that mismatch (its size would only say it is too large)."""
    name = printable(str(path))
    claimed = claimed_soundness(path, limit) if soundness is not None else None
    if claimed is not None and claimed != soundness:
        raise FormatError(f"{name}: the proof claims the {claimed!r} soundness bound, but the verifier requires "
                          f"{soundness!r}: verify with soundness={claimed!r} (zk verify --soundness {claimed}) if "
                          f"that bound is enough for you, or prove with soundness={soundness!r}")
    return loads(read_untrusted(path, limit, what="proof file"), name)


def claimed_soundness(path: str, limit: int = MAX_FILE) -> str | None:
    """The soundness analysis the header of the proof file at ``path`` names (``"longfellow"`` when it names
    none), reading only its first ``14 + hlen`` bytes (at most ``limit``); None for anything that is not a
    regular file with a well-formed header (:func:`load` then says what is wrong)."""
    try:
        fh, _ = open_untrusted(path, None, "proof file")  # its size is load's check: only the header is read
    except FormatError:                               # a link, directory, FIFO or device: load says so
        return None
    with fh:
        start = fh.read(14)
        if len(start) < 14 or start[:8] != MAGIC:
            return None
        version, hlen = struct.unpack("<HI", start[8:])
        if version not in (1, 2, VERSION) or 14 + hlen > limit:
            return None
        try:
            head = json_loads(fh.read(hlen).decode())
        except (ValueError, RecursionError):
            return None
    if not isinstance(head, dict):
        return None
    claimed = head.get("soundness", DEFAULT_SOUNDNESS)
    return claimed if claimed in SOUNDNESS else None


def max_bytes(p: Params, header: bytes, n_public: int, rows: int, rows2: int = 0) -> int:
    """The largest file :func:`loads` accepts for parameters ``p``, this ``header``, ``n_public`` public values,
    ``rows`` committed rows and, with lookups, ``rows2`` rows of the second commitment."""
    def commitment(m: int) -> int:          # root, row count, columns, salts, sibling count, the most siblings
        return 32 + 4 + 8 * m * p.t + 16 * p.t + 4 + 32 * p.t * p.n.bit_length()
    return (len(MAGIC) + 6 + len(header) + 8 * n_public + 8 * p.sigma * (p.K + p.lin_len + p.quad_len)
            + commitment(rows) + (commitment(rows2) if rows2 else 0) + 32)
