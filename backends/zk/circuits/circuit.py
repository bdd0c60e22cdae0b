"""``zk.compile``: a compiled model's fixed-point program as an R1CS circuit.

The public statement is what a verifier sees:
* by default, the parameters (and any optimizer state) before the step are
  public inputs, and the program's outputs (the parameters after the step,
  or the predictions for ``predict``) are public outputs;
* the batch ``x, y`` is private.

With ``public="commitments"`` the parameters stay private too: the statement is a commitment before,
one after and a dataset root (:mod:`.private`).

:meth:`Circuit.statement` describes the statement and :meth:`Circuit.public`
gives its values.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from circuitgrad import allocator
from circuitgrad.compile import CompiledModel, compile_model
from circuitgrad.fixedpoint import FixedPointOverflow
from circuitgrad.schedule import Program
from circuitgrad.types import Fixed, fixed

from . import formats, fusion
from . import gadgets as G
from . import intervals as I
from . import statement as S
from .field import BN254, LIGERO51, Field
from . import private as P
from .commit import depth_for
from .lower import ZK_RULES, Lowering, required_bits, widest_contraction
from .r1cs import R1CS, TABLE_BITS, Builder

__all__ = ["Circuit", "Witness", "compile", "compile_program", "default_range_checks"]


@dataclass
class Witness:
    """A full assignment of the circuit's wires (signed int64; ``values[0] = 1``)."""
    circuit: "Circuit"
    values: np.ndarray
    seconds: float = 0.0

    @property
    def public(self) -> list[int]:
        """Public signals in snarkjs order (outputs, then public inputs), as field elements."""
        r = self.circuit.r1cs
        return [int(v) % r.field.p for v in self.values[1:1 + r.n_public]]

    def outputs(self) -> dict[str, np.ndarray]:
        """The program outputs (raw fixed point), by name."""
        return {n: self.values[w] for n, w in zip(self.circuit.output_names, self.circuit.output_wires)}


@dataclass
class Circuit:
    """An R1CS circuit of one compiled function (``step`` or ``predict``) with its witness program."""
    r1cs: R1CS
    program: Program
    model: CompiledModel | None
    function: str
    input_names: list[str]
    input_wires: list[np.ndarray]
    output_names: list[str]
    output_wires: list[np.ndarray]
    public_inputs: list[str]
    fills: list | None = field(repr=False, default_factory=list)     # None: compiled with witness=False
    compile_seconds: float = 0.0
    last_witness: Witness | None = field(default=None, repr=False)

    @property
    def field(self) -> Field:
        return self.r1cs.field

    dtype: Fixed = None
    #: the circuit is sound over any prime ``p > 2^required_bits`` (see ``lower.required_bits``)
    required_bits: int | None = None
    #: what the targets ``y`` are constrained to: ``"one-hot"``, ``"any"``, or None (no targets)
    targets: str | None = None
    #: the commitments and dataset openings of a private step (``public="commitments"``), else None
    private: P.Layout | None = None
    #: the range checks by lookups, ``nbits → values`` (what chooses the limb width)
    range_requests: dict = dataclasses.field(default_factory=dict, repr=False)
    #: values without a wire (:meth:`.r1cs.Builder.combination`): the witness program computes them at the
    #: negative indices of an array this much longer than the wires
    n_combinations: int = 0

    def statement_data(self) -> dict:
        """The public statement as plain data (see :func:`.statement.describe`)."""
        return S.describe(self)

    def statement(self) -> str:
        """The public statement in one readable line: model, program hash, loss, optimizer constants
        (as written and raw), dtype, field, public and private shapes, circuit size."""
        return S.render(self.statement_data())

    def digest(self) -> bytes:
        """SHA-256 of the constraint system and the whole statement; proofs are bound to it."""
        return S.digest(self)

    def split_public(self, public) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Public values (field elements, snarkjs order) → (outputs, public inputs) as raw signed arrays.

        Every value must be a canonical field element in ``[0, p)``; anything else raises ValueError.
        """
        p = self.field.p
        vals = [int(v) for v in public]
        if len(vals) != self.r1cs.n_public:
            raise ValueError(f"expected {self.r1cs.n_public} public values, got {len(vals)}")
        bad = next((i for i, v in enumerate(vals) if not 0 <= v < p), None)
        if bad is not None:
            raise ValueError(f"public value {bad} ({vals[bad]}) is not a canonical field element in [0, p)")
        if self.private is not None:            # digests: field elements, not signed fixed point
            c = self.private.capacity
            d = [np.array(vals[i:i + c], dtype=np.int64) for i in range(0, 3 * c, c)]
            return {"commitment_after": d[0]}, {"commitment_before": d[1], "data_root": d[2]}
        signed = np.array([v - p if v > p // 2 else v for v in vals], dtype=object)
        out, pos = {}, 0
        for n, w in zip(self.output_names, self.output_wires):
            out[n] = signed[pos:pos + w.size].astype(np.int64).reshape(w.shape)
            pos += w.size
        ins = {}
        for n, w in zip(self.input_names, self.input_wires):
            if n in self.public_inputs:
                ins[n] = signed[pos:pos + w.size].astype(np.int64).reshape(w.shape)
                pos += w.size
        return out, ins

    # ------------------------------------------------------------ witness
    def _inputs(self, params: Mapping[str, np.ndarray], x, y) -> list[np.ndarray]:
        m = self.model
        vals = []
        for name in self.input_names:
            if name == "x":
                v = m._x(x, self.function)
            elif name == "y":
                v = m._targets(y)
                self._check_targets(v)
            else:
                key = name if name in params else name.replace("_", "/", 1)
                if key not in params:
                    raise KeyError(f"missing parameter {name!r}; expected {self.public_inputs}")
                v = np.asarray(params[key])
                v = v.astype(np.int64) if np.issubdtype(v.dtype, np.integer) else m.cast(v, f"parameter {name}")
            vals.append(v)
        return vals

    def _check_targets(self, y: np.ndarray) -> None:
        if self.targets != "one-hot":
            return
        one = 1 << self.dtype.frac
        ok = np.isin(y, (0, one)).all(axis=-1) & ((y == one).sum(axis=-1) == 1)
        if not ok.all():
            row = int(np.flatnonzero(~ok.reshape(-1))[0])
            raise ValueError(f"{self.function}: target row {row} is not one-hot; this circuit was compiled with "
                             f"targets='one-hot' (the default for classification losses): pass class labels or "
                             f"one-hot rows, or compile with zk.compile(..., targets='any') to prove other targets")

    def witness(self, params: Mapping[str, np.ndarray], x, y=None) -> Witness:
        """Every wire's value for one call, computed layer by layer (bit-exact with the interpreter)."""
        return self.witness_raw(self._inputs(params, x, y))

    def witness_private(self, params: Mapping[str, np.ndarray], x, y, tree, r_before, r_after) -> Witness:
        """The witness of a private step (``public="commitments"``): the batch rows must be rows of
        ``tree`` (a :class:`~.commit.DataTree`), ``r_before``/``r_after`` blind the two commitments."""
        if self.private is None:
            raise ValueError(f"{self.function}: this circuit makes its parameters public; compile it with "
                             f"zk.compile(..., public='commitments') for a private step")
        inputs = self._inputs(params, x, y)
        return self.witness_raw(inputs, P.extra_values(self, inputs, tree, r_before, r_after))

    def witness_raw(self, inputs: list[np.ndarray], extra: Mapping[str, np.ndarray] | None = None) -> Witness:
        """The witness for raw fixed-point program inputs (in program order); ``extra``: the values of a
        private step's further wires (as :func:`.private.extra_values` returns them)."""
        if self.r1cs.counted:
            raise ValueError("zk: this circuit was counted, not built (zk.compile(..., count_only=True)): it has no "
                             "witness program; compile it without count_only")
        if self.fills is None:
            raise ValueError("zk: this circuit was compiled without its witness program (zk.compile(..., "
                             "witness=False), as a verifier does): it checks proofs but computes no witness")
        t0 = time.perf_counter()
        W = np.zeros(self.r1cs.n_wires + self.n_combinations, dtype=np.int64)
        W[0] = 1
        if len(inputs) != len(self.input_wires):
            raise TypeError(f"{self.function}: expected {len(self.input_wires)} inputs, got {len(inputs)}")
        for name, wires, v in zip(self.input_names, self.input_wires, inputs):
            v = np.asarray(v, dtype=np.int64)
            if v.shape != wires.shape:
                raise ValueError(f"{self.function}: input {name} must have shape {list(wires.shape)}, "
                                 f"got {list(v.shape)}")
            if v.size and (v.min() < self.dtype.lo or v.max() > self.dtype.hi):
                raise FixedPointOverflow(f"{self.function}: input {name} does not fit in {self.dtype}")
            W[wires.reshape(-1)] = v.reshape(-1)
        if (self.private is None) != (extra is None):
            raise TypeError(f"{self.function}: a private step's witness needs its commitments and dataset "
                            f"openings (Circuit.witness_private); other circuits take none")
        if extra is not None:
            P.set_extra(self.private, W, extra)
        for wires, fn in self.fills:
            W[wires] = np.asarray(fn(W), dtype=np.int64).reshape(-1)
        if self.n_combinations:
            W = W[:self.r1cs.n_wires].copy()
        allocator.trim()
        wit = Witness(self, W, time.perf_counter() - t0)
        self.last_witness = wit
        return wit

    def release_witness_program(self) -> None:
        """Drop the witness program (about a sixth of a large circuit's memory) once no more witnesses are
        needed: the circuit still proves, checks and verifies, as one compiled with ``witness=False``."""
        if self.fills is not None and not self.r1cs.counted:
            self.fills = None
            allocator.trim()

    def check(self, wit: Witness | np.ndarray) -> bool:
        """True when the witness satisfies every constraint."""
        values = wit.values if isinstance(wit, Witness) else np.asarray(wit)
        return self.r1cs.check(values)

    def assert_satisfied(self, wit: Witness | np.ndarray) -> None:
        """Raise naming the first failing constraint and the operation it came from."""
        self.r1cs.assert_satisfied(wit.values if isinstance(wit, Witness) else np.asarray(wit))

    @property
    def range_checks(self) -> str:
        """``"lookup"`` when the circuit proves ranges by lookups (native prover only), else ``"bits"``."""
        return "bits" if self.r1cs.L is None else "lookup"

    @property
    def contractions(self) -> str:
        """``"argument"`` when products of witness tensors are proved by the native prover's contraction
        argument, else ``"mac"`` (one constraint per multiply-accumulate)."""
        return "argument" if self.r1cs.contractions else "mac"

    def require_r1cs(self, what: str) -> None:
        """Raise unless the circuit is plain R1CS (no lookups, no contractions): what snarkjs and circom take."""
        if self.r1cs.counted:
            raise ValueError(f"{what}: this circuit was counted, not built (zk.compile(..., count_only=True))")
        if self.r1cs.L is not None:
            raise ValueError(f"{what}: this circuit proves its ranges with {self.r1cs.n_lookups} lookups, which "
                             f".r1cs files and snarkjs cannot express; compile it with "
                             f"zk.compile(..., range_checks='bits') for snarkjs and circom, or prove it with "
                             f"the native prover (system='ligero')")
        if self.r1cs.contractions:
            raise ValueError(f"{what}: this circuit proves {len(self.r1cs.contractions)} matrix products with the "
                             f"native prover's contraction argument, which needs challenges that .r1cs files and "
                             f"snarkjs cannot express; compile it with zk.compile(..., range_checks='bits') (or "
                             f"contractions='mac') for snarkjs and circom, or prove it with the native prover "
                             f"(system='ligero')")

    # ------------------------------------------------------------- export
    def export(self, directory: str, wit: Witness | None = None, name: str | None = None) -> dict[str, str]:
        """Write ``<name>.r1cs``, ``<name>.wtns`` (if a witness is known) and ``<name>.sym``."""
        self.require_r1cs("export")
        os.makedirs(directory, exist_ok=True)
        name = name or self.function
        wit = wit or self.last_witness
        paths = {"r1cs": os.path.join(directory, f"{name}.r1cs"), "sym": os.path.join(directory, f"{name}.sym")}
        formats.write_r1cs(paths["r1cs"], self.r1cs)
        formats.write_sym(paths["sym"], self.r1cs)
        if wit is not None:
            paths["wtns"] = os.path.join(directory, f"{name}.wtns")
            formats.write_wtns(paths["wtns"], wit.values, self.field)
        return paths


def default_range_checks(field: Field) -> str:
    """``"lookup"`` over the native prover's field (:data:`LIGERO51`), ``"bits"`` otherwise (snarkjs)."""
    return "lookup" if field == LIGERO51 else "bits"


def default_contractions(range_checks: str) -> str:
    """``"argument"`` for circuits only the native prover proves (lookups), ``"mac"`` for plain R1CS."""
    return "argument" if range_checks == "lookup" else "mac"


#: wires added between two returns of the heap's free pages while compiling (:func:`circuitgrad.allocator.trim`)
_TRIM_WIRES = 1 << 22


def compile(model: CompiledModel, dtype: Fixed | None = None, field: Field | None = None,
            function: str = "step", targets: str | None = None, range_checks: str | None = None,
            public: str = "params", data_rows: int | None = None, contractions: str | None = None,
            table_bits: int | None = None, count_only: bool = False, fuse: str = "auto",
            witness: bool = True) -> Circuit:
    """The R1CS circuit of ``model``'s ``step`` (default) or ``predict`` in fixed point.

    ``dtype`` defaults to the model's own dtype if it is fixed point, else
    ``fixed(32, 16)``. ``targets`` (functions with targets ``y`` only):
    ``"one-hot"`` constrains every row of ``y`` to one entry ``1.0`` and the
    rest ``0`` (``B·K + B`` constraints); ``"any"`` leaves ``y`` free within
    the dtype's range. The default is ``"one-hot"`` for
    ``nn.softmax_cross_entropy`` and ``"any"`` for other losses.

    ``range_checks``: ``"bits"`` proves every range by a bit decomposition (plain R1CS, for
    snarkjs and circom); ``"lookup"`` by lookups into tables ``[0, 2^b)``, which only the
    native Ligero prover proves (logUp) and which makes a transformer step about half the size.
    The default follows the field: ``"lookup"`` over :data:`LIGERO51`, ``"bits"`` otherwise.
    ``table_bits`` (3 to 22) is the limb width of those range checks; by default the one of 8 to 22 that
    minimises the prover's committed cells for this circuit (:func:`.gadgets.best_table_bits`): 8 for a small
    MLP, up to 20 for tinygpt's step in fixed(20, 10), whose 20-bit values are then one lookup each.

    ``count_only``: lower the program to count its constraints, lookups, wires and nonzeros by tag
    (what ``cg.cost`` reports) without building the matrices or the witness program, so that circuits
    too large to hold (tinygpt's step) can still be measured; the result cannot be proved or exported.

    ``witness=False``: build the constraint system without the witness program (the gadgets' fill functions,
    about half of a large circuit's memory), which is all a verifier needs; such a circuit computes no witness.

    ``fuse``: with lookups, an elementwise region of one input (GELU and the parts of its derivative that
    depend only on its input, a chain of scalings) is proved by one lookup per value it hands on into the
    table of its function (:mod:`.fusion`) instead of a gadget per instruction: ``"auto"`` (default) where
    the tables cost less than the gadgets, ``"always"``, or ``"never"``. The witness is the same either way.

    ``contractions``: ``"argument"`` proves each product of two witness tensors (``MatMul``,
    ``BatchMatMul``, convolutions through them) by the native prover's contraction argument, whose cost
    is linear in the three matrices (docs/ZK.md); ``"mac"`` by one constraint per multiply-accumulate
    (plain R1CS, for snarkjs and circom). The default follows ``range_checks``: ``"argument"`` with
    lookups, ``"mac"`` with bits.

    ``public``: ``"params"`` (default) makes the parameters before and after the step public;
    ``"commitments"`` keeps them private behind Poseidon2 commitments and proves that the batch's
    rows belong to a dataset of ``data_rows`` rows committed by its Merkle root (:mod:`.private`; the
    native prover's field :data:`LIGERO51` only, which is then the default field).
    """
    if public not in P.PUBLIC:
        raise ValueError(f"zk.compile: public must be one of {list(P.PUBLIC)}, got {public!r}")
    if public == "commitments":
        field = field or LIGERO51
        if field != LIGERO51 or function != "step":
            raise ValueError(f"zk.compile: public='commitments' proves training steps over the native prover's "
                             f"field ligero51 (got function={function!r}, field {field})")
        if data_rows is None:
            raise ValueError("zk.compile: public='commitments' needs data_rows=N, the number of rows of the committed "
                             "dataset (zk.commit_dataset(...).commitment.rows), which sets its Merkle tree's depth")
        depth_for(data_rows)
    elif data_rows is not None:
        raise ValueError("zk.compile: data_rows= applies to public='commitments' only")
    field = field or BN254
    dtype = dtype or (model.dtype if isinstance(model.dtype, Fixed) else fixed(32, 16))
    if not isinstance(dtype, Fixed):
        raise TypeError(f"zk.compile: circuits compute in fixed point; got dtype {dtype}")
    fx = model if model.dtype == dtype else compile_model(model.model, model.loss_fn, model.optimizer, dtype)
    if function not in fx.diagrams:
        raise ValueError(f"zk.compile: unknown function {function!r}; choose one of {sorted(fx.diagrams)}")
    in_names = list(fx.arg_names[function])
    out_names = (fx.param_names + fx.state_names) if function == "step" else (
        fx.param_names if function == "gradients" else [function])
    if "y" not in in_names:
        if targets is not None:
            raise ValueError(f"zk.compile: {function} has no targets y; targets= applies to step, gradients, loss")
    else:
        from circuitgrad import nn
        targets = targets or ("one-hot" if fx.loss_fn is nn.softmax_cross_entropy else "any")
        if targets not in S.TARGETS:
            raise ValueError(f"zk.compile: targets must be one of {list(S.TARGETS)}, got {targets!r}")
    constrain = {"y": _one_hot} if targets == "one-hot" else {}
    committed = [n for n in in_names if n not in ("x", "y")]
    lay = P.Layout(data_rows, committed, fx.batch, dtype.width) if public == "commitments" else None
    c = compile_program(fx.fn(function).program, dtype, field, in_names, [] if lay else committed, out_names,
                        function, constrain, range_checks, lay, contractions, table_bits, count_only, fuse,
                        witness)
    c.model, c.targets = fx, targets
    return c


def _one_hot(b: Builder, y: np.ndarray, dtype: Fixed) -> None:
    """Every row of ``y`` one-hot in raw fixed point: ``y(y − 2^f) = 0`` per entry, ``Σ_row y = 2^f``.

    Sound over any ``p > K·2^f``: each entry is ``0`` or ``2^f`` (a product of field elements is zero
    only if a factor is), and ``K`` such entries sum to ``2^f`` without wrapping only if exactly one is set.
    """
    one = 1 << dtype.frac
    flat = y.reshape(-1)
    b.constrain([(flat, 1)], [(flat, 1), (G.ONE, -one)], [], "targets.one_hot")
    rows = y.reshape(-1, y.shape[-1])
    b.constrain([(rows[:, k], 1) for k in range(rows.shape[1])], [(G.ONE, 1)], [(G.ONE, one)], "targets.row_sum")


def compile_program(prog: Program, dtype: Fixed, field: Field = BN254, input_names: list[str] | None = None,
                    public_inputs: list[str] | None = None, output_names: list[str] | None = None,
                    function: str | None = None, constrain: Mapping | None = None,
                    range_checks: str | None = None, private: P.Layout | None = None,
                    contractions: str | None = None, table_bits: int | None = None,
                    count_only: bool = False, fuse: str = "auto", witness: bool = True) -> Circuit:
    """The circuit of any fixed-point SSA program (``public_inputs`` default: none).

    ``range_checks``: ``"bits"`` or ``"lookup"`` (default: :func:`default_range_checks` of the field).
    ``constrain`` maps input names to extra gadgets ``fn(builder, wires, dtype)`` (e.g. one-hot targets).
    ``private``: the layout of a private step (:mod:`.private`): its outputs stay internal, and its
    public values are the layout's commitments and dataset root.
    """
    t0 = time.perf_counter()
    function = function or prog.name
    need = required_bits(prog, dtype)
    if field.p <= 1 << need:
        widest = widest_contraction(prog)
        raise ValueError(f"zk.compile: field {field} ({field.bits} bits) is too small for {dtype}: this program's "
                         f"products and remainders need p > 2^{need} to never wrap around"
                         + (f" (its longest contraction, {widest})" if widest else ""))
    missing = sorted({type(a.op).__name__ for a in prog.instrs if type(a.op) not in ZK_RULES})
    if missing:
        raise NotImplementedError(f"zk.compile: the ZK backend has no rule for {missing} (used by {function})")
    in_names = list(input_names or [f"in{i}" for i in range(len(prog.inputs))])
    public_in = list(public_inputs or [])
    out_names = list(output_names or [f"out{i}" for i in range(len(prog.outputs))])
    range_checks = range_checks or default_range_checks(field)
    if range_checks == "lookup" and table_bits is None:         # lower once, then at the best limb width
        args = (prog, dtype, field, input_names, public_inputs, output_names, function, constrain, range_checks,
                private, contractions)
        first = compile_program(*args, table_bits=TABLE_BITS, count_only=True, fuse=fuse)   # to count the ranges
        best = G.best_table_bits(first.range_requests, math.log2(field.p))
        c = compile_program(*args, table_bits=best, count_only=count_only, fuse=fuse, witness=witness)
        c.compile_seconds = time.perf_counter() - t0
        return c
    b = Builder(field, range_checks, contractions or default_contractions(range_checks), table_bits or TABLE_BITS,
                count_only, witness)
    # wire layout: public outputs, public inputs, private inputs, internal
    if private is None:
        pub_out = [b.alloc(prog.types[v].shape, f"out.{n}") for v, n in zip(prog.outputs, out_names)]
    else:
        P.allocate_public_outputs(b, private)
    n_pub_out = b.n - 1
    ins = {}
    for v, n in zip(prog.inputs, in_names):
        if n in public_in:
            ins[v] = b.alloc(prog.types[v].shape, n)
    if private is not None:
        P.allocate_public_inputs(b, private)
    n_pub_in = b.n - 1 - n_pub_out
    for v, n in zip(prog.inputs, in_names):
        if n not in public_in:
            ins[v] = b.alloc(prog.types[v].shape, n)
    if private is not None:
        P.allocate_private(b, private)
    n_prv_in = b.n - 1 - n_pub_out - n_pub_in
    L = Lowering(b, dtype)
    env: dict[int, np.ndarray] = dict(ins)
    for v, n in zip(prog.inputs, in_names):
        b.context = f"input {n}"
        G.range_check(b, env[v].reshape(-1), dtype, "input.range")
        if constrain and n in constrain:
            constrain[n](b, env[v], dtype)
    one_hot = [bool(constrain) and constrain.get(n) is _one_hot for n in in_names]
    _, proven = I.intervals(prog, dtype, [(0, 1 << dtype.frac) if h else None for h in one_hot])
    wired = I.product_operands(prog)
    fused = fusion.plan(prog, dtype, math.log2(field.p), range_checks == "lookup", fuse)
    trim_at = _TRIM_WIRES
    for i, a in enumerate(prog.instrs):
        if b.n >= trim_at:              # the gadgets' freed temporaries back to the kernel as the circuit grows
            allocator.trim()
            trim_at = b.n + _TRIM_WIRES
        b.context = f"{a.op.name}#{i}"
        if i in fused.fused:            # an elementwise region's instruction: its exports are table lookups
            fused.lower(L, i, a, env)
            continue
        L.proven, L.wired = i in proven, i in wired
        outs = ZK_RULES[type(a.op)](L, a.op, *(env[x] for x in a.args))
        for r, o in zip(a.results, outs):
            env[r] = o
    if private is None:
        for k, (v, w) in enumerate(zip(prog.outputs, pub_out)):
            b.context = f"output {out_names[k]}"
            src = np.ascontiguousarray(np.broadcast_to(env[v], w.shape)).reshape(-1)
            b.constrain([(src, 1)], [(G.ONE, 1)], [(w.reshape(-1), 1)], "output")
            b.fill(w, lambda W, src=src: W[src])
    else:
        pub_out = [b.materialize(np.ascontiguousarray(np.broadcast_to(env[v], prog.types[v].shape)))
                   for v in prog.outputs]
        P.constrain(b, private, {n: ins[v] for v, n in zip(prog.inputs, in_names)}, pub_out)
    r = b.finish(n_pub_out, n_pub_in, n_prv_in)
    allocator.trim()
    return Circuit(r, prog, None, function, in_names, [ins[v] for v in prog.inputs], out_names, pub_out,
                   public_in, b.fills if b.witness or count_only else None, time.perf_counter() - t0, None, dtype,
                   need, private=private, range_requests=dict(b.range_requests), n_combinations=b.n_combinations)
