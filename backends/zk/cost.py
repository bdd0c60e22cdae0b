"""ZK: the circuit's constraints and lookups, exactly, by definition and gadget kind; a prover time.

The counts are those of the circuit itself: the program is lowered by the ZK backend's own rules
(no matrix is proved), and every constraint block's tag (``MatMul#12:product``) names the
instruction, hence the definition, that emitted it.  The native Ligero prover's time is predicted
from its work on the circuit (:func:`prover_features`: the rows it encodes, the columns it hashes,
the constraint matrices' nonzeros, the lookups, what it recomputes when it streams its rows), each with a
rate calibrated once on this machine by proving synthetic circuits, a 256×256 contraction, small MLP
steps and the GPT d=16 and d=32 steps, as kept and as streamed proofs (cached like the CPU calibration).
"""
from __future__ import annotations

import math
import os
import re
import statistics
import time
from typing import Any

import numpy as np

from circuitgrad import nn
from circuitgrad.cache import cache_dir
from circuitgrad.compile import CompiledModel, compile_model
from circuitgrad.costmodel.calibration import calibrated
from circuitgrad.costmodel.report import Cost, table
from circuitgrad.costmodel.cpu import machine
from circuitgrad.progress import progress
from circuitgrad.types import fixed

from .circuits.circuit import Circuit, Witness
from .circuits.circuit import compile as compile_circuit
from .circuits.field import LIGERO51
from .circuits.r1cs import Builder
from .circuits.tables import FUNCTION_TABLE
from .systems import ligero
from .systems.ligero import choose
from .systems.ligero import prover as prover_module
from .systems.ligero.lookup import TABLE
from .systems.ligero.params import contraction_sigma, lookup_sigma
from .systems.ligero.protocol import layout

__all__ = ["estimate", "by_gadget", "prover_features", "prover_seconds", "prover_memory", "calibrate_prover",
           "recalibrate", "PROVER_FEATURES"]

_TAG = re.compile(r"^[^#:]*#(\d+):")
_VERSION = 8


def _circuit(f: Any, function: str, dtype, field, range_checks):
    if not isinstance(f, CompiledModel):
        raise TypeError(f"cost: the zk target needs a compiled model (cg.compile_model), got {type(f).__name__}")
    field = field or LIGERO51
    return compile_circuit(f, dtype=dtype, field=field, function=function, range_checks=range_checks, count_only=True)


#: what the prover's time is modelled in (see :func:`prover_features`)
PROVER_FEATURES = ("call", "encode", "linear", "columns", "nonzeros", "lookups", "contractions", "opened",
                   "codeword")


def prover_features(c, keep: int | None = None) -> list[float]:
    """The Ligero prover's work on circuit ``c``, from its own parameter choice and matrix layout, and what it
    keeps between its passes (:func:`.systems.ligero.prover.plan`, ``keep`` as for ``ligero.prove``):
    one call; the encoding (rows encoded × codeword length × log₂ of it: every row once when the encoded matrix
    is kept, else twice, and the rows of ``z`` once more for each repetition of the linear test after the
    first); the linear test's dense coefficient rows (those on ``z``, σ of each: an inverse NTT and a coset
    evaluation per row, the rank-one blocks cost none); hashing and combining the columns (rows × codeword
    length); the rows' values ``A·z``, ``B·z``, ``C·z`` (their nonzeros) and the linear test's transposed
    products (σ of them), once per pass that computes them; logUp (its lookups, once per such pass); the
    contraction argument (every wire occurrence of its matrices, once per Freivalds draw and linear test);
    and, when the matrix is not kept, the opened columns evaluated from each row's coefficients (rows × its
    degree bound × opened columns); and what each commitment does once per column (its salt, leaf and tree
    nodes: the codeword length, once a round), which dominates the smallest circuits."""
    pc = _Sizes(c.r1cs)                     # the prover's view of the circuit's sizes (no matrices: counted circuits)
    p = choose(pc.n_wires, pc.n_constraints, lookups=pc.n_lookups, contractions=pc.contraction_cells,
               table=pc.lookup_table or TABLE)
    lay = layout(pc, p)
    kept, values_kept = prover_module.plan(lay, p, keep)
    terms = c.r1cs.n_contraction_terms * p.contraction_sigma * (p.sigma + 1)
    ntt = p.n * math.log2(p.n)
    encoded = lay.total if kept else 2 * lay.total + (p.sigma - 1) * lay.mz
    passes = 1 if kept or values_kept else 3                # the values: commit, tests, openings
    return [1.0, float(encoded * ntt), float(p.sigma * lay.mz * ntt), float(lay.total * p.n),
            float(c.r1cs.nonzeros * (passes + p.sigma)), float(pc.n_lookups * passes), float(terms),
            0.0 if kept else float(lay.total * p.K * p.t), float(p.n * (2 if lay.second else 1))]


class _Sizes:
    """What the Ligero layout reads of a prepared circuit, from an R1CS (built or counted)."""

    def __init__(self, r):
        self.r1cs, self.n_wires, self.n_constraints, self.n_lookups = r, r.n_wires, r.n_constraints, r.n_lookups
        self.lookup_table = r.lookup_table_size
        self.contraction_cells = r.contraction_cells


def _contraction(n: int):
    """One exact product ``C = A·B`` of private ``n×n`` matrices, proved by the contraction argument."""
    b = Builder(LIGERO51, "bits", "argument")
    pub = b.alloc(1, "out")
    A, B, C = b.alloc((n, n)), b.alloc((n, n)), b.alloc((n, n))
    b.contract(A, B, C, "matmul.contraction")
    b.constrain([(C.reshape(-1)[:1], 1)], [(0, 1)], [(pub, 1)], "output")
    r = b.finish(1, 0, 3 * n * n)
    rng = np.random.default_rng(0)
    W = np.zeros(r.n_wires, dtype=np.int64)
    W[0] = 1
    W[A], W[B] = rng.integers(-2 ** 15, 2 ** 15, (2, n, n))
    W[C] = W[A] @ W[B]
    W[pub] = W[C.reshape(-1)[:1]]
    c = Circuit(r, None, None, f"contraction{n}", [], [], [], [], [], [], 0.0, None, fixed(16, 8), 48)
    return c, Witness(c, W)


def _synthetic(n: int, lookups: bool = False):
    """``n`` products ``c = a·b`` of private values over the Ligero field (with ``lookups``: ``a`` and ``b``
    range-checked by lookups), with their witness."""
    b = Builder(LIGERO51, "lookup" if lookups else "bits")
    pub = b.alloc(1, "out")
    A, B, C = b.alloc(n), b.alloc(n), b.alloc(n)
    b.constrain([(A, 1)], [(B, 1)], [(C, 1)], "product")
    b.constrain([(C[:1], 1)], [(0, 1)], [(pub, 1)], "output")
    if lookups:
        b.lookup([(A, 1)], "range")
        b.lookup([(B, 1)], "range")
    r = b.finish(1, 0, 2 * n)
    rng = np.random.default_rng(0)
    W = np.zeros(r.n_wires, dtype=np.int64)
    W[0] = 1
    W[A], W[B] = rng.integers(0, 256, (2, n)) if lookups else rng.integers(-2 ** 15, 2 ** 15, (2, n))
    W[C] = W[A] * W[B]
    W[pub] = W[C[:1]]
    c = Circuit(r, None, None, f"synthetic{n}", [], [], [], [], [], [], 0.0, None, fixed(16, 8), 32)
    return c, Witness(c, W)


#: the calibration circuits: synthetic products (count, with lookups), small MLP training steps (batch, sizes) and
#: GPT training steps (batch, sequence, vocabulary, width, heads, layers: the benchmark's d=16 and d=32), each
#: proved as it would be (``None``) or with every row streamed (``keep=0``: what a large circuit does)
_CALIBRATION = (("products", 1 << 8, False, None), ("products", 1 << 12, False, None),
                ("products", 1 << 16, False, None), ("products", 1 << 16, False, 0),
                ("products", 1 << 15, True, None), ("products", 1 << 15, True, 0), ("contraction", 256, None, None),
                ("contraction", 256, None, 0), ("step", 4, (3, 6, 2), None), ("step", 16, (12, 48, 6), None),
                ("step", 64, (16, 64, 8), None), ("step", 64, (16, 64, 8), 0),
                ("gpt", 2, (8, 16, 16, 2, 1), None), ("gpt", 2, (8, 16, 16, 2, 1), 0),
                ("gpt", 2, (16, 32, 32, 2, 1), None), ("gpt", 2, (16, 32, 32, 2, 1), 0))


def _calibration_circuit(kind: str, n, arg):
    if kind == "products":
        return _synthetic(n, arg)
    if kind == "contraction":
        return _contraction(n)
    rng = np.random.default_rng(0)
    if kind == "gpt":
        S, V, d, heads, layers = arg
        step = compile_model(nn.gpt(n, S, V, d=d, heads=heads, layers=layers), loss=nn.softmax_cross_entropy,
                             optimizer=nn.sgd(0.125), dtype=fixed(16, 8))
        c = compile_circuit(step, field=LIGERO51)
        return c, c.witness(step.init_params(seed=0), rng.integers(0, V, (n, S)), rng.integers(0, V, (n, S)))
    step = compile_model(nn.mlp(n, list(arg)), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                         dtype=fixed(16, 8))
    c = compile_circuit(step, field=LIGERO51)
    return c, c.witness(step.init_params(seed=0), rng.uniform(-1, 1, (n, arg[0])), rng.integers(0, arg[-1], n))


def _prover_key() -> dict:
    """What the prover's calibration depends on: one with another key is measured again."""
    return {"version": _VERSION, "machine": machine(), "cpu_count": os.cpu_count(), "numpy": np.__version__}


def calibrate_prover(refresh: bool = False) -> tuple[float, ...]:
    """Seconds per unit of each of :data:`PROVER_FEATURES`, fitted (non-negative least squares) to proofs of
    the :data:`_CALIBRATION` circuits (synthetic products with and without lookups, a 256×256 contraction, MLP
    and GPT training steps, several of them both kept and streamed): about 13 s on an idle 2-core x86_64
    machine, compiling included (2–4× that when other work shares the cores),
    with its progress on standard error; then read from ``ligero-calibration.json`` in the cache until it is
    stale (:mod:`circuitgrad.costmodel.calibration`: another machine or format, too old, or measured under load
    on a machine now quieter). ``refresh=True`` measures it again now."""

    def parse(d: dict) -> tuple[float, ...] | None:
        rates = tuple(float(v) for v in d["seconds_per"])
        ok = len(rates) == len(PROVER_FEATURES) and all(np.isfinite(r) and r >= 0 for r in rates)
        return rates if ok else None
    rates, _ = calibrated("ligero-calibration.json", _prover_key(), parse, _fit_prover,
                          lambda rates: {"seconds_per": list(rates)}, "the Ligero prover's time model", refresh,
                          announce=False)
    return rates


def recalibrate() -> tuple[float, ...]:
    """Measure the prover's calibration again now (``circuitgrad cost --target zk --recalibrate``)."""
    return calibrate_prover(refresh=True)


#: a proof at least this long is timed once; shorter ones take the median of up to three, within this time
_ONE_PROOF_S = 1.0


def _proof_seconds(prove) -> float:
    """Seconds per proof: one proof if it takes :data:`_ONE_PROOF_S` or more (its run-to-run spread, a few per
    cent, is below the model's error), else the median of up to three proofs within that time."""
    ts = []
    while len(ts) < 3 and (not ts or sum(ts) < _ONE_PROOF_S):
        t0 = time.perf_counter()
        prove()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _label(kind: str, n, arg, keep) -> str:
    streamed = " streamed" if keep == 0 else ""
    if kind == "products":
        return f"2^{n.bit_length() - 1} products{' with lookups' if arg else ''}{streamed}"
    if kind == "contraction":
        return f"{n}×{n} contraction{streamed}"
    if kind == "gpt":
        return f"GPT d={arg[2]} b{n} step{streamed}"
    return f"MLP {'-'.join(map(str, arg))} b{n} step{streamed}"


def _fit_prover() -> tuple[float, ...]:
    import sys

    from scipy.optimize import nnls
    print(f"circuitgrad: calibrating the Ligero prover's time model on this machine, once: proving "
          f"{len(_CALIBRATION)} small circuits (about 13 s on an idle 2-core machine); the rates are cached in "
          f"{os.path.join(cache_dir(), 'ligero-calibration.json')}", file=sys.stderr, flush=True)
    X, y = [], []
    with progress(len(_CALIBRATION), "calibrating the Ligero prover", unit="circuit", file=sys.stderr) as bar:
        for i, (kind, n, arg, keep) in enumerate(_CALIBRATION):
            c, wit = _calibration_circuit(kind, n, arg)
            ligero.expected_params(c)                          # prepared (digest, index) once, as a bench's circuit
            X.append(prover_features(c, keep))
            if i == 0:
                ligero.prove(c, wit, check=False)             # warm-up: first-call costs are not a proof's
            y.append(_proof_seconds(lambda: ligero.prove(c, wit, check=False, keep=keep)))
            bar.set_postfix(last=f"{_label(kind, n, arg, keep)} {y[-1]:.2f} s")
            bar.update()
    X, y = np.array(X), np.array(y)
    X, y = X / y[:, None], np.ones_like(y)                    # relative errors: small proofs count as much
    scale = np.where(X.max(axis=0) > 0, X.max(axis=0), 1.0)   # nnls on comparable columns
    coef = nnls(X / scale, y)[0] / scale
    return tuple(float(v) for v in coef)


#: terms per lookup row of ``L`` (a counted circuit does not count them: 1.78–1.88 on the benchmark circuits)
LOOKUP_TERMS = 1.9


def prover_memory(c) -> int:
    """The memory (bytes) the native Ligero prover adds to its process for circuit ``c``, built or counted
    (:func:`.systems.ligero.prover.memory`: what a proof reports as ``timings["memory"]``)."""
    r = c.r1cs
    pc = _Sizes(r)
    p = choose(pc.n_wires, pc.n_constraints, lookups=pc.n_lookups, contractions=pc.contraction_cells,
               table=pc.lookup_table or TABLE)
    terms = len(r.L.wires) if r.L is not None and not r.counted else int(LOOKUP_TERMS * r.n_lookups)
    return prover_module.memory(layout(pc, p), p, r.nonzeros, terms)


def prover_seconds(c) -> float:
    """The native Ligero prover's predicted time on circuit ``c`` (this machine's calibration)."""
    return float(np.dot(calibrate_prover(), prover_features(c)))


def estimate(f: Any, device: str | None = None, function: str = "step", depth: int = 2, dtype=None,
             field=None, range_checks: str | None = None, prover_time: bool = True):
    c = _circuit(f, function, dtype, field, range_checks)
    r = c.r1cs
    paths = [a.path for a in c.program.instrs]
    lines = []
    for tags, bounds, what in ((r.tags, r.block_rows, "constraints"), (r.lookup_tags, r.lookup_block_rows, "lookups")):
        for tag, n in zip(tags, np.diff(np.asarray(bounds))):
            m = _TAG.match(tag)
            word = tag.split(":", 1)[0].split(" ", 1)[0]
            path = paths[int(m.group(1))] if m else f"({word if word.endswith('s') else word + 's'})"
            lines.append((path, {"constraints": 0, "lookups": 0, what: int(n)}))
    kinds = by_gadget(r)
    rows, total = table(lines, depth)
    total.values.setdefault("constraints", 0)
    total.values.setdefault("lookups", 0)
    notes = [f"{r.n_constraints:,} constraints and {r.n_lookups:,} lookups over {r.field} "
             f"(ranges by {'lookups' if r.L is not None else 'bits'}), {r.n_wires:,} wires, dtype {c.dtype}"]
    if prover_time:
        secs = prover_seconds(c)
        size = max(total.constraints + total.lookups, 1)
        for row in rows:                      # shared out by each definition's share of the rows
            row.values["seconds"] = secs * (row.values["constraints"] + row.values["lookups"]) / size
        total.values["seconds"] = secs
        notes.append(f"Ligero prover: {secs:.2f} s predicted (a model of its work, calibrated on this machine "
                     f"by proving synthetic circuits: see docs/COST.md)")
    mem = prover_memory(c)
    notes.append(f"Ligero prover memory: {mem / 2 ** 20:,.0f} MiB predicted above the process's own (the prepared "
                 f"circuit, the linear test's coefficients, the encoded matrix when it is kept, blocks in flight)")
    top = sorted(kinds.items(), key=lambda kv: -(kv[1]["constraints"] + kv[1]["lookups"]))[:8]
    notes.append("by gadget: " + ", ".join(f"{k} {v['constraints'] + v['lookups']:,}" for k, v in top))
    heavy = sorted(kinds.items(), key=lambda kv: -kv[1]["cells"])[:8]
    notes.append(f"committed cells {sum(v['cells'] for v in kinds.values()):,} (range-check limbs of "
                 f"{r.table_bits} bits, tables {_tables(r) or 'none'}): "
                 + ", ".join(f"{k} {v['cells']:,}" for k, v in heavy))
    return Cost("zk", str(r.field), function, rows, total, notes, {"circuit": c, "by_gadget": kinds,
                                                                   "prover_memory": mem})


def _tables(r) -> str:
    """``2^10, 2^20, 3 function tables of 3,145,728 entries``."""
    ranges = [f"2^{b}" for b in r.lookup_tables if b < FUNCTION_TABLE]
    fn = r.function_tables
    return ", ".join(ranges + ([f"{len(fn)} function tables of {sum(len(t) for t in fn):,} entries"] if fn else []))


def by_gadget(r) -> dict[str, dict[str, int]]:
    """Per gadget kind (the tag after the last ':') of the R1CS ``r`` (built or counted): its ``constraints``,
    ``lookups``, ``wires`` (:attr:`.r1cs.R1CS.wires_by_gadget`) and the ``cells`` the native prover commits for
    it before padding rows to ``k``: a cell per wire (``z``), three per constraint (``a``, ``b``, ``c``),
    ``1 + σL`` per lookup (``v`` and its inverses ``h``) and ``3·σC`` per Freivalds cell of a contraction.
    The tables' ``(1 + σL)·|T|`` cells (multiplicities ``m``, terms ``g``) are the kind ``"(lookup tables)"``,
    named wires (inputs, outputs, constants) ``"(named)"``."""
    sl = lookup_sigma(r.n_lookups, table=r.lookup_table_size)
    sc = contraction_sigma(r.contraction_cells)
    out: dict[str, dict[str, int]] = {}

    def add(kind: str, what: str, n: int) -> None:
        out.setdefault(kind, {"constraints": 0, "lookups": 0, "wires": 0, "cells": 0})[what] += int(n)
    for tags, bounds, what in ((r.tags, r.block_rows, "constraints"), (r.lookup_tags, r.lookup_block_rows, "lookups")):
        for tag, n in zip(tags, np.diff(np.asarray(bounds))):
            add(tag.rsplit(":", 1)[-1], what, n)
    for kind, n in r.wires_by_gadget.items():
        add(kind, "wires", n)
    for c in r.contractions:
        add(c.tag.rsplit(":", 1)[-1], "cells", 3 * sc * c.a.shape[0] * c.a.shape[2])
    if r.n_lookups:
        add("(lookup tables)", "cells", (1 + sl) * r.lookup_table_size)
    for v in out.values():
        v["cells"] += v["wires"] + 3 * v["constraints"] + (1 + sl) * v["lookups"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["cells"]))
