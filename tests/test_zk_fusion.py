"""Fused elementwise regions (:mod:`circuitgrad.backends.zk.circuits.fusion`): one lookup per value a region hands on.

The regions found (GELU and its input-only derivative parts), each table against the fixed-point interpreter
run on every input one at a time, the same witness outputs with and without fusion, and cheating provers: a
wrong table output, an output outside the format that packs into a table entry, an input outside the
table's domain. Proofs of fused circuits verify and are bound to the fused circuit.
"""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends import zk
from circuitgrad.backends.zk.circuits import fusion
from circuitgrad.backends.zk.circuits.bounds import no_wrap_bounds
from circuitgrad.backends.zk.circuits.tables import FUNCTION_TABLE
from circuitgrad.fixedpoint import run_fixed
from circuitgrad.schedule import retype

Q = cg.fixed(16, 8)
SMALL = cg.fixed(10, 5)


def _program(fn, dt, shape=(4,)):
    d = cg.trace(fn, [cg.NdArrayType(shape)], name="f")
    return retype(cg.schedule(d), dt)


def _step():
    return cg.compile_model(nn.gpt(2, 8, 16, d=16, heads=2, layers=1, dtype=Q), loss=nn.softmax_cross_entropy,
                            optimizer=nn.momentum(0.1, 0.9), dtype=Q)


@pytest.fixture(scope="module")
def fused():
    step = _step()
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 16, (2, 8)), rng.integers(0, 16, (2, 8))
    c = zk.compile(step, field=zk.LIGERO51, fuse="always")
    return step, c, c.witness(step.init_params(0), x, y), (x, y)


# ------------------------------------------------------------------ regions
@pytest.mark.parametrize("fn, instrs, exports", [
    (ops.gelu, 9, 1),                                                    # x², x/2, x³, …, tanh, 1 + t, (x/2)(1 + t)
    (lambda x: ops.tanh(ops.scale(x, 0.5)), 2, 1),
    (lambda x: ops.mul(ops.sigmoid(x), x), 2, 1),                        # x is the root: SiLU is one region
    (lambda x: ops.add(ops.mul(x, x), ops.scale(x, 3.0)), 3, 1),
])
def test_an_elementwise_function_of_one_input_is_one_region(fn, instrs, exports):
    prog = _program(fn, Q)
    p = fusion.plan(prog, Q, 51, True, "always")
    assert len(p.regions) == 1
    region = p.regions[0]
    assert region.root == prog.inputs[0]
    assert len(region.instrs) == instrs and len(region.exports) == exports
    assert region.exports == [v for v in prog.outputs if v != region.root]


def test_two_inputs_are_not_a_region():
    d = cg.trace(lambda x, y: ops.mul(ops.tanh(x), ops.tanh(y)), [cg.NdArrayType((4,)), cg.NdArrayType((4,))],
                 name="f")
    prog = retype(cg.schedule(d), Q)
    p = fusion.plan(prog, Q, 51, True, "always")
    assert sorted(len(r.instrs) for r in p.regions) == [1, 1]           # tanh(x) and tanh(y); the product is not
    assert all(len(r.exports) == 1 for r in p.regions)


def test_a_gpt_steps_regions_are_its_gelus_and_they_export_what_the_backward_pass_reads():
    step = _step()
    prog = step.fn("step").program
    p = fusion.plan(prog, Q, 51, True, "always")
    gelu = max((r for r in p.regions if all("gelu" in prog.instrs[i].path for i in r.instrs)), key=lambda r: len(r.instrs))
    # the forward pass and 1 − tanh²; it exports y, x/2, x², 1 + tanh and 1 − tanh²: the forward output and the
    # four factors the derivative multiplies by
    assert len(gelu.instrs) == 12 and len(gelu.exports) == 5


@pytest.mark.parametrize("fuse, wide, lookups, fits", [("never", False, True, True), ("always", True, True, True),
                                                      ("always", False, False, True), ("always", False, True, False)])
def test_no_fusion_without_lookups_wide_formats_small_fields_or_when_asked(fuse, wide, lookups, fits):
    dt = cg.fixed(24, 12) if wide else Q
    prog = _program(ops.gelu, dt)
    p = fusion.plan(prog, dt, 51 if fits else 32, lookups, fuse)
    assert p.regions == [] and p.fused == {}


def test_an_unknown_fuse_is_refused():
    with pytest.raises(ValueError, match=r"^fuse must be one of \['auto', 'always', 'never'\], got 'sometimes'$"):
        fusion.plan(_program(ops.gelu, Q), Q, 51, True, "sometimes")


def test_auto_fuses_only_where_the_tables_cost_less():
    small, large = (_program(ops.gelu, Q, shape) for shape in ((8,), (4096,)))
    assert fusion.plan(small, Q, 51, True, "auto").regions == []
    assert len(fusion.plan(large, Q, 51, True, "auto").regions) == 1


# ------------------------------------------------------------------ tables
@pytest.mark.parametrize("fn", [ops.gelu, lambda x: ops.tanh(ops.scale(x, 0.5)),
                                lambda x: ops.add(ops.mul(x, x), ops.scale(x, 3.0))], ids=["gelu", "tanh", "poly"])
def test_every_table_entry_is_the_interpreters_value_for_that_input(fn):
    prog = _program(fn, SMALL)
    p = fusion.plan(prog, SMALL, 51, True, "always")
    region = p.regions[0]
    one = _program(fn, SMALL, (1,))
    for k, x in enumerate(range(SMALL.lo, SMALL.hi + 1)):
        try:
            want = int(run_fixed(one, [np.array([x], dtype=np.int64)])[0][0])
        except cg.FixedPointOverflow:
            assert not region.valid[k], x
            continue
        assert region.valid[k], x
        assert int(region.values[region.exports[0]][k]) == want, x
    assert 0 < region.valid.sum() <= 1 << SMALL.width


def test_the_fused_circuit_computes_the_same_outputs_and_is_smaller(fused):
    step, c, w, (x, y) = fused
    plain = zk.compile(step, field=zk.LIGERO51, fuse="never")
    wp = plain.witness(step.init_params(0), x, y)
    assert c.check(w) and plain.check(wp)
    o, op = w.outputs(), wp.outputs()
    assert o.keys() == op.keys() and all(np.array_equal(o[k], op[k]) for k in o)
    assert c.r1cs.n_constraints < plain.r1cs.n_constraints
    assert c.r1cs.function_tables and not plain.r1cs.function_tables
    assert c.digest() != plain.digest()
    assert "function tables of" in c.statement() and "function tables" not in plain.statement()


def test_a_fused_circuit_cannot_wrap(fused):
    _, c, w, _ = fused
    b = no_wrap_bounds(c.r1cs)
    assert b.no_wrap() and b.max < c.r1cs.field.p, b.worst()
    values = w.values[:c.r1cs.n_wires]
    assert np.all((b.lo <= values) & (values <= b.hi))


# ------------------------------------------------------------------ cheating
def _fused_output(c):
    """A fused output wire: the one the first packed lookup reads with coefficient 2^w."""
    return _fused_output_of(c.r1cs, "gelu")


def test_a_wrong_table_output_breaks_its_lookup(fused):
    _, c, w, _ = fused
    r = c.r1cs
    row, y, _ = _fused_output(c)
    bad = w.values.copy()
    bad[y] += 1                                                 # still in the format: only the table sees it
    assert row in r.failing_lookups(bad) and not c.check(bad)
    with pytest.raises(zk.UnsatisfiedConstraint, match=r"^lookup \d+ of \d+ is outside its table function table \d+ "
                                                       r"\([\d,]+ entries\) \(\d+ failing in all\); it comes from "
                                                       r"\w+#\d+:fused$"):
        c.assert_satisfied(bad)
    with pytest.raises(ValueError, match=r"^ligero: lookup \d+ \(.*:fused\) is outside its table function table"):
        zk.prove(c, bad, check=False)


def test_an_output_outside_the_format_that_packs_into_the_table_is_caught_by_its_range_check(fused):
    """``y' = f(t) + (t − x)/2^w`` makes the packed pair of input ``x`` equal to the entry of ``t``: only the range
    check of ``y`` stops it."""
    _, c, w, _ = fused
    r = c.r1cs
    p = r.field.p
    row, y, x = _fused_output(c)
    key = int(r.lookup_bits[row])
    bad = w.values.copy() % p
    v = r.L.evaluate(bad, p, np.array([row]))[0]
    table = r.function_tables[key - FUNCTION_TABLE]
    other = int(table[np.flatnonzero(table != v)[0]])          # another entry of the same table
    bad[y] = (int(bad[y]) + (other - int(v)) * pow(1 << Q.width, -1, p)) % p
    assert int(r.L.evaluate(bad, p, np.array([row]))[0]) == other
    failing = r.failing_lookups(bad, r.lookup_rows_of_wire(y))
    assert row not in failing                                   # the packed pair is in the table
    assert [r.lookup_tag_of(int(i)).rsplit(":", 1)[-1] for i in failing] == ["fused.range.limbs"]


def test_an_input_outside_the_regions_domain_has_no_witness():
    prog = _program(ops.gelu, Q)
    c = zk.compile_program(prog, Q, zk.LIGERO51, fuse="always")
    with pytest.raises(cg.FixedPointOverflow, match=r"^Mul#\d+: an elementwise region leaves fixed\(16,8\) at input "
                                                    r"100$"):
        c.witness_raw([np.full(4, 100 << 8, dtype=np.int64)])
    ok = c.witness_raw([np.array([-512, -1, 0, 700], dtype=np.int64)])
    assert c.check(ok)


# ------------------------------------------------------------------ proofs
def test_a_fused_step_proves_and_verifies_and_its_proof_is_bound_to_the_fusion(fused):
    step, c, w, (x, y) = fused
    proof = zk.prove(c, w, rng=np.random.default_rng(0))
    assert zk.verify(proof, c, w.public)
    plain = zk.compile(step, field=zk.LIGERO51, fuse="never")
    with pytest.raises(zk.Reject):
        zk.check(proof, plain, w.public)


def test_a_prover_claiming_a_wrong_function_value_is_rejected(monkeypatch):
    """``gelu(x)`` with a public output: the cheat claims ``y + 1`` (so every constraint holds) and counts its
    packed pair as the honest entry in the multiplicities."""
    from circuitgrad.backends.zk.systems.ligero.encoding import Encoding
    from circuitgrad.backends.zk.circuits.tables import index
    prog = _program(ops.gelu, Q)
    c = zk.compile_program(prog, Q, zk.LIGERO51, fuse="always")
    w = c.witness_raw([np.array([-300, -5, 40, 600], dtype=np.int64)])
    assert zk.verify(zk.prove(c, w, rng=np.random.default_rng(0)), c, w.public)
    r = c.r1cs
    row, y, _ = _fused_output_of(r, "f")
    out = int(c.output_wires[0].reshape(-1)[0])
    bad = w.values.copy()
    bad[y] += 1
    bad[out] += 1                                               # the public output claims the same wrong value
    assert r.failing(bad).size == 0 and list(r.failing_lookups(bad)) == [row]
    honest = w.values

    def multiplicities(real, enc):                              # the wrong pair counted as the honest one
        v = enc.pc.L.apply(enc.z.copy())
        v[row] = enc.pc.L.apply(honest % r.field.p)[row]
        keys = r.lookup_bits
        return np.bincount(enc.lay.lk.starts()[enc.lay.lk.table_of(keys)] + index(keys, v, r.function_tables),
                           minlength=enc.lay.lk.size)
    monkeypatch.setattr(Encoding, "_multiplicities", lambda self: multiplicities(None, self))
    proof = zk.prove(c, bad, check=False, rng=np.random.default_rng(1))
    with pytest.raises(zk.Reject, match=r"^linear test 0"):
        zk.check(proof, c, bad[1:1 + r.n_public] % r.field.p)


def _fused_output_of(r, name):
    rows = [int(r.lookup_block_rows[i]) for i, t in enumerate(r.lookup_tags) if t.endswith(":fused")]
    row = [k for k in rows if name in r.function_names[int(r.lookup_bits[k]) - FUNCTION_TABLE]][0]
    terms = slice(r.L.ptr[row], r.L.ptr[row + 1])
    coeffs = r.L.coeffs[terms]
    return row, int(r.L.wires[terms][coeffs == 1 << Q.width][0]), int(r.L.wires[terms][coeffs == 1][0])


def test_a_lookup_challenge_may_be_no_entry_of_any_table():
    from circuitgrad.backends.zk.circuits.tables import collision
    fn = (np.array([5, 1 << 30, 3 << 39], dtype=np.int64),)
    keys = (8, 12, FUNCTION_TABLE)
    assert collision(4095, keys, fn) == "a table [0, 4096)"
    assert collision(1 << 30, keys, fn) == "function table 0 (3 entries)"
    assert collision(3 << 39, keys, fn) == "function table 0 (3 entries)"
    assert collision(4096, keys, fn) is None and collision((1 << 30) + 1, keys, fn) is None
    assert collision(5, (FUNCTION_TABLE,), fn) == "function table 0 (3 entries)" and collision(4, (FUNCTION_TABLE,), fn) is None


@pytest.mark.parametrize("seed", range(4))
def test_honest_proofs_with_many_function_tables_verify(fused, seed):
    """16 function tables: a verifier that took their keys for widths refused about one honest proof in four."""
    _, c, w, _ = fused
    assert len(c.r1cs.function_tables) == 16
    assert zk.verify(zk.prove(c, w, rng=np.random.default_rng(100 + seed)), c, w.public)


def test_no_more_function_tables_than_a_proof_may_claim(monkeypatch):
    monkeypatch.setattr(fusion, "MAX_FUNCTION_TABLES", 5)
    p = fusion.plan(_step().fn("step").program, Q, 51, True, "always")
    assert len({t.tobytes() for t in p.tables.values()}) <= 5 and p.regions


def test_a_region_defined_on_no_input_is_left_to_its_gadgets():
    dt = cg.fixed(8, 4)
    prog = _program(lambda x: ops.add(ops.add(ops.mul(x, x), 4.0), 4.0), dt)      # ≥ 8 for every x: never in range
    assert fusion.plan(prog, dt, 51, True, "always").regions == []
    c = zk.compile_program(prog, dt, zk.LIGERO51, fuse="always")
    with pytest.raises(cg.FixedPointOverflow):
        c.witness_raw([np.zeros(4, dtype=np.int64)])


def test_the_keys_of_a_range_of_lookups_are_the_per_lookup_keys(fused):
    r = fused[1].r1cs
    n, every = r.n_lookups, r.lookup_bits
    for lo, hi in [(0, n), (0, 1), (n - 1, n), (5, 5), (37, 40_001), (1000, n)]:
        assert np.array_equal(r.lookup_keys(lo, hi), every[lo:hi]), (lo, hi)
    starts = r.lookup_block_rows
    for i in range(1, min(len(starts) - 1, 20)):                # around every seam of the first blocks
        a = int(starts[i])
        assert np.array_equal(r.lookup_keys(a - 1, a + 1), every[a - 1:a + 1])


def test_the_builder_refuses_a_malformed_function_table_and_an_unknown_key():
    from circuitgrad.backends.zk.circuits.r1cs import Builder
    b = Builder(zk.LIGERO51, "lookup")
    msg = r"^Builder\.function_table: a table is a non-empty ascending array of distinct field elements$"
    for bad in ([], [3, 3], [5, 2], [-1, 4], [1, zk.LIGERO51.p]):
        with pytest.raises(ValueError, match=msg):
            b.function_table(np.array(bad, dtype=np.int64), "f")
    key = b.function_table(np.array([1, 7]), "f")
    assert key == FUNCTION_TABLE and b.function_table(np.array([1, 7]), "g") == key    # shared by content
    x = b.alloc(2)
    with pytest.raises(ValueError, match=rf"^Builder\.table_lookup: no function table has key {key + 1}$"):
        b.table_lookup([(x, 1)], "fused", key + 1)
