"""Private steps: the parameters stay behind commitments and the batch is proved to come from a dataset.

``zk.compile(step, public="commitments", data_rows=N)`` builds the circuit of one training step whose
public statement is three digests::

    C_before = H_commit(params, state ‖ r_before)        public input
    D        = root of the dataset's ternary Merkle tree  public input
    C_after  = H_commit(params', state' ‖ r_after)        public output

and whose private inputs are the parameters and optimizer state, the batch ``x, y``, the two blindings
``r_before, r_after``, and for every batch row its Merkle opening (two sibling digests and a position
per level). The step's outputs never leave the circuit: they are hashed into ``C_after``.

Per level of an opening, the three children are the current digest ``c`` and the siblings ``s1, s2``
with ``c`` at the position given by two bits ``e0, e2`` (``e0 = 1``: first, ``e2 = 1``: last,
neither: middle)::

    slot0 = s1 + e0·(c − s1)      slot2 = s2 + e2·(c − s2)      slot1 = c + s1 + s2 − slot0 − slot2

``e0, e2`` are bits and not both set: three constraints; each slot of ``slot0, slot2`` costs one
constraint per digest element and ``slot1`` one more (it must be a wire to enter the hash), then one
permutation hashes the node.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import gadgets as G
from .commit import ARITY, DOMAINS, DataTree, check_randomness, commit, depth_for, pack, per_element
from .poseidon2 import hash_gadget, poseidon2
from .r1cs import Builder

__all__ = ["PUBLIC", "Layout", "depth_for", "allocate_public_outputs", "allocate_public_inputs",
           "allocate_private", "constrain", "row_indices", "extra_values", "set_extra"]

#: what ``zk.compile(..., public=...)`` may make public
PUBLIC = ("params", "commitments")


@dataclass
class Layout:
    """The wires of a private step circuit beyond the program's own."""
    data_rows: int
    committed: list[str]                     # the inputs committed to, in order (parameters, then state)
    batch: int                               # rows of x (and y)
    width: int = 16                          # bits of a raw fixed-point value (the circuit's dtype), for packing
    capacity: int = 0
    depth: int = 0
    c_after: np.ndarray = field(default=None, repr=False)
    c_before: np.ndarray = field(default=None, repr=False)
    root: np.ndarray = field(default=None, repr=False)
    r_before: np.ndarray = field(default=None, repr=False)
    r_after: np.ndarray = field(default=None, repr=False)
    siblings: np.ndarray = field(default=None, repr=False)      # (batch, depth, 2, capacity)
    bits: np.ndarray = field(default=None, repr=False)          # (batch, depth, 2): e0, e2

    def describe(self, fld) -> dict:
        h = poseidon2(fld)
        return {"hash": f"poseidon2(t={h.t}, d={h.d}, rounds_f={h.rounds_f}, rounds_p={h.rounds_p}, "
                        f"capacity={h.capacity})",
                "committed": list(self.committed), "blinding": self.capacity, "data_rows": self.data_rows,
                "packing": f"{per_element(self.width, fld)} values of {self.width} bits per element",
                "merkle_arity": ARITY, "merkle_depth": self.depth}

    def private_inputs(self) -> list[list]:
        return [["r_before", list(self.r_before.shape)], ["r_after", list(self.r_after.shape)],
                ["merkle_siblings", list(self.siblings.shape)], ["merkle_positions", list(self.bits.shape)]]


def allocate_public_outputs(b: Builder, lay: Layout) -> None:
    lay.capacity = poseidon2(b.field).capacity
    lay.depth = depth_for(lay.data_rows)
    lay.c_after = b.alloc(lay.capacity, "commitment_after")


def allocate_public_inputs(b: Builder, lay: Layout) -> None:
    lay.c_before = b.alloc(lay.capacity, "commitment_before")
    lay.root = b.alloc(lay.capacity, "data_root")


def allocate_private(b: Builder, lay: Layout) -> None:
    c = lay.capacity
    lay.r_before, lay.r_after = b.alloc(c, "r_before"), b.alloc(c, "r_after")
    lay.siblings = b.alloc((lay.batch, lay.depth, ARITY - 1, c), "merkle_siblings")
    lay.bits = b.alloc((lay.batch, lay.depth, 2), "merkle_positions")


def _equal(b: Builder, digest: np.ndarray, public: np.ndarray, kind: str, fill: bool = False) -> None:
    """``digest = public`` elementwise; with ``fill``, the public wires (outputs) are computed from the digest."""
    b.constrain([(digest.reshape(-1), 1)], [(G.ONE, 1)], [(public.reshape(-1), 1)], kind)
    if fill:
        b.fill(public, lambda W: W[digest.reshape(-1)])


def _pack(b: Builder, V: np.ndarray, width: int) -> np.ndarray:
    """Wires ``S + (L,)`` of range-checked ``width``-bit values → wires of their :func:`.commit.pack`,
    one linear constraint per packed element."""
    k = per_element(width, b.field)
    S, L = V.shape[:-1], V.shape[-1]
    n = -(-L // k)                                             # packed elements
    padded = np.zeros(S + (n * k,), dtype=np.int64)          # padding: the ONE wire with coefficient 0
    padded[..., :L] = V
    valid = (np.arange(n * k) < L).reshape(n, k)
    out = b.alloc(S + (n,), "packed")
    coef = valid.astype(np.int64) << (width * np.arange(k, dtype=np.int64))      # 2^{w·j} where a value is
    terms = [(padded[..., j::k].reshape(-1), np.broadcast_to(coef[:, j], S + (n,)).reshape(-1)) for j in range(k)]
    offset = np.broadcast_to(coef.sum(axis=1) << (width - 1), S + (n,)).reshape(-1)    # Σ_j 2^{w·j}·2^{w−1}
    b.constrain([(out.reshape(-1), 1)], [(G.ONE, 1)], terms + [(G.ONE, offset)], "pack")
    b.fill(out, lambda W: pack(W[V], width, b.field).reshape(-1))
    return out


def _commitment(b: Builder, values: list[np.ndarray], r: np.ndarray, width: int) -> np.ndarray:
    flat = _pack(b, np.concatenate([np.asarray(v).reshape(-1) for v in values]), width)
    return hash_gadget(b, np.concatenate([flat, r]), poseidon2(b.field), DOMAINS["commit"])


def constrain(b: Builder, lay: Layout, inputs: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
    """The commitments to the inputs and outputs, and the Merkle openings of the batch rows."""
    h = poseidon2(b.field)
    before = [inputs[n] for n in lay.committed]
    b.context = "commitment before"
    _equal(b, _commitment(b, before, lay.r_before, lay.width), lay.c_before, "commitment.before")
    b.context = "commitment after"
    after = [np.ascontiguousarray(np.broadcast_to(o, inputs[n].shape)) for o, n in zip(outputs, lay.committed)]
    _equal(b, _commitment(b, after, lay.r_after, lay.width), lay.c_after, "commitment.after", fill=True)
    b.context = "dataset membership"
    rows = np.concatenate([inputs["x"].reshape(lay.batch, -1)] +
                          ([inputs["y"].reshape(lay.batch, -1)] if "y" in inputs else []), axis=1)
    cur = hash_gadget(b, _pack(b, rows, lay.width), h, DOMAINS["leaf"])      # (batch, capacity)
    e0, e2 = lay.bits[..., 0], lay.bits[..., 1]
    b.constrain([(lay.bits.reshape(-1), 1)], [(lay.bits.reshape(-1), 1)], [(lay.bits.reshape(-1), 1)],
                "merkle.position_bit")
    b.constrain([(e0.reshape(-1), 1)], [(e2.reshape(-1), 1)], [], "merkle.position_one")
    for k in range(lay.depth):
        s1, s2 = lay.siblings[:, k, 0], lay.siblings[:, k, 1]                # (batch, capacity)
        bit0 = np.broadcast_to(e0[:, k, None], s1.shape)
        bit2 = np.broadcast_to(e2[:, k, None], s2.shape)
        slots = b.alloc((lay.batch, ARITY, lay.capacity), f"merkle.level{k}")
        for slot, bit, sib in ((slots[:, 0], bit0, s1), (slots[:, 2], bit2, s2)):
            b.constrain([(bit.reshape(-1), 1)], [(cur.reshape(-1), 1), (sib.reshape(-1), -1)],
                        [(slot.reshape(-1), 1), (sib.reshape(-1), -1)], "merkle.select")
        b.constrain([(cur.reshape(-1), 1), (s1.reshape(-1), 1), (s2.reshape(-1), 1), (slots[:, 0].reshape(-1), -1),
                     (slots[:, 2].reshape(-1), -1)], [(G.ONE, 1)], [(slots[:, 1].reshape(-1), 1)], "merkle.middle")

        def fill(W, cur=cur, s1=s1, s2=s2, bit0=bit0, bit2=bit2):
            c, a, z = W[cur], W[s1], W[s2]
            first = np.where(W[bit0] == 1, c, a)
            last = np.where(W[bit2] == 1, c, z)
            return np.stack([first, c + a + z - first - last, last], axis=1)
        b.fill(slots, fill)
        cur = hash_gadget(b, slots.reshape(lay.batch, ARITY * lay.capacity), h, DOMAINS["node"])
    _equal(b, cur, np.broadcast_to(lay.root, cur.shape), "merkle.root")


def row_indices(circuit, inputs: list[np.ndarray], tree: DataTree) -> list[int]:
    """The positions in ``tree`` of a batch's raw rows (``x`` row, then ``y`` row), the batch given as raw
    program ``inputs``; ValueError naming the first row that is not in the dataset."""
    by = dict(zip(circuit.input_names, inputs))
    b = circuit.private.batch
    rows = np.concatenate([by["x"].reshape(b, -1)] + ([by["y"].reshape(b, -1)] if "y" in by else []), axis=1)
    if rows.shape[1] != tree.row_size:
        raise ValueError(f"a batch row has {rows.shape[1]} values (x then y, raw), the dataset's rows have "
                         f"{tree.row_size}")
    return [tree.index_of(row) for row in rows]


def extra_values(circuit, inputs: list[np.ndarray], tree: DataTree, r_before, r_after) -> dict[str, np.ndarray]:
    """The values of a private step's further wires, for raw program ``inputs`` (program order).

    The batch rows (``x`` row then ``y`` row, raw) are looked up in ``tree``; a row that is not in the
    dataset, or a dataset of another size than the circuit's, is refused here, before any proving.
    """
    lay = circuit.private
    if tree.n != lay.data_rows:
        raise ValueError(f"this circuit proves batches of a dataset of {lay.data_rows} rows; the dataset has {tree.n}")
    if tree.field != circuit.field or tree.bits != lay.width:
        raise ValueError(f"the dataset was committed as {tree.bits}-bit values over {tree.field}; the circuit "
                         f"proves {lay.width}-bit values over {circuit.field}")
    by = dict(zip(circuit.input_names, inputs))
    sib = np.zeros(lay.siblings.shape, dtype=np.int64)
    bits = np.zeros(lay.bits.shape, dtype=np.int64)
    for i, index in enumerate(row_indices(circuit, inputs, tree)):
        s, pos = tree.path(index)
        sib[i], bits[i, :, 0], bits[i, :, 1] = s, pos == 0, pos == ARITY - 1
    r_before, r_after = check_randomness(r_before, circuit.field), check_randomness(r_after, circuit.field)
    return {"commitment_before": np.array(commit([by[n] for n in lay.committed], r_before, lay.width, circuit.field)),
            "data_root": np.array(tree.root), "r_before": np.array(r_before), "r_after": np.array(r_after),
            "merkle_siblings": sib, "merkle_positions": bits}


def set_extra(lay: Layout, W: np.ndarray, extra) -> None:
    """Write ``extra`` (as :func:`extra_values` returns it) into the witness ``W``, shapes checked."""
    for name, wires in (("commitment_before", lay.c_before), ("data_root", lay.root), ("r_before", lay.r_before),
                        ("r_after", lay.r_after), ("merkle_siblings", lay.siblings), ("merkle_positions", lay.bits)):
        if name not in extra:
            raise KeyError(f"private step witness: missing {name}")
        v = np.asarray(extra[name], dtype=np.int64)
        if v.shape != wires.shape:
            raise ValueError(f"private step witness: {name} must have shape {list(wires.shape)}, got {list(v.shape)}")
        W[wires.reshape(-1)] = v.reshape(-1)
