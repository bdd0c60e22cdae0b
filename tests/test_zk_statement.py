"""What a proof claims: the statement names everything, the digest binds it, public values are canonical,
and classification targets are constrained to one-hot rows."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk

DT = cg.fixed(16, 8)
X = np.array([[0.5, 1.0], [1.0, 0.0]])
LABELS = np.array([0, 1])


def _circuit(lr=0.125, opt=None, loss=nn.softmax_cross_entropy, field=zk.LIGERO51, **kw):
    step = cg.compile_model(nn.mlp(2, [2, 3, 2]), loss=loss, optimizer=opt or nn.sgd(lr), dtype=DT)
    return step, zk.compile(step, field=field, **kw)


@pytest.fixture(scope="module")
def proved():
    step, c = _circuit()
    w = c.witness(step.init_params(0), X, LABELS)
    return step, c, w, zk.prove(c, w)


def test_statement_names_model_loss_optimizer_constants_dtype_field_and_shapes():
    _, c = _circuit(opt=nn.momentum(0.125, 0.5))
    d = c.statement_data()
    assert d["model"] == "mlp(2,2-3-2)" and d["loss"] == "softmax_cross_entropy" and d["dtype"] == "fixed(16,8)"
    assert d["optimizer"] == {"name": "momentum", "constants": {"lr": {"value": 0.125, "raw": 32},
                                                                "beta": {"value": 0.5, "raw": 128}}}
    assert d["field"] == {"name": "ligero51", "p": str(zk.LIGERO51.p)}
    assert d["private_inputs"] == [["x", [2, 2]], ["y", [2, 2]]] and d["targets"] == "one-hot"
    text = c.statement()
    for part in ("step of mlp(2,2-3-2) [program sha256 ", "loss softmax_cross_entropy",
                 "optimizer momentum(lr=0.125 (raw 32), beta=0.5 (raw 128)) in fixed(16,8) over ligero51",
                 "private: x[2, 2], y[2, 2] (targets y: one-hot rows)"):
        assert part in text


@pytest.mark.parametrize("other", [
    dict(lr=0.5), dict(loss=nn.mse), dict(opt=nn.momentum(0.125, 0.5)), dict(field=zk.BN254), dict(targets="any"),
])
def test_every_part_of_the_statement_changes_the_statement_and_the_digest(other):
    _, base = _circuit()
    _, c = _circuit(**other)
    assert c.statement() != base.statement() and c.digest() != base.digest()


def test_a_proof_does_not_verify_for_another_learning_rate(proved):
    _, c, w, proof = proved
    _, other = _circuit(lr=0.5)
    assert zk.verify(proof, c, w.public)
    with pytest.raises(zk.Reject, match=r"^the proof is for another circuit \(digest mismatch\)$"):
        zk.check(proof, other, w.public)


@pytest.mark.parametrize("field", [zk.LIGERO51, zk.BN254])
def test_public_values_must_be_canonical_field_elements(field):
    step, c = _circuit(field=field)
    w = c.witness(step.init_params(0), X, LABELS)
    proof = zk.prove(c, w)
    assert zk.verify(proof, c, w.public)
    for i, delta in ((0, field.p), (5, field.p), (len(w.public) - 1, 2 * field.p)):
        aliased = list(w.public)
        aliased[i] += delta
        assert not zk.verify(proof, c, aliased)
        with pytest.raises(zk.Reject, match=rf"^public value {i} \({aliased[i]}\) is not a canonical element of "
                                            rf"{field.name} \(it must lie in \[0, p\)\)$"):
            zk.check(proof, c, aliased)
    negative = list(w.public)
    negative[0] = -1
    assert not zk.verify(proof, c, negative)
    with pytest.raises(ValueError, match=r"^public value 0 \(-1\) is not a canonical field element in \[0, p\)$"):
        c.split_public(negative)


def test_split_public_gives_the_parameters_before_and_after(proved):
    step, c, w, _ = proved
    outs, ins = c.split_public(w.public)
    params = step.init_params(0)
    after = step.step(params, X, LABELS)
    assert list(outs) == step.param_names and all(np.array_equal(outs[n], after[n]) for n in outs)
    assert all(np.array_equal(v, params[n]) for v, n in zip(ins.values(), step.param_names))


def test_verify_needs_the_verifiers_circuit(proved):
    _, c, w, proof = proved
    with pytest.raises(TypeError, match=r"^zk.verify: a proof is checked against the circuit the verifier compiled"):
        zk.verify(proof)


@pytest.mark.parametrize("rows, failing", [
    ([[0.5, 0.5], [0, 1]], "targets.one_hot"),       # soft labels
    ([[100.0, 0], [0, 1]], "targets.one_hot"),       # a label scaled to move the bias 100 times as far
    ([[0, 0], [0, 1]], "targets.row_sum"),           # no class
    ([[1, 1], [0, 1]], "targets.row_sum"),           # two classes
    ([[1, 0], [-1, 2]], "targets.one_hot"),
])
def test_one_hot_targets_are_constrained(rows, failing):
    step, c = _circuit(field=zk.BN254)
    params = step.init_params(0)
    with pytest.raises(ValueError, match=r"^step: target row \d is not one-hot; this circuit was compiled with "
                                         r"targets='one-hot'"):
        c.witness(params, X, np.array(rows, dtype=float))
    # a prover who skips the check gets a witness that breaks exactly the target constraints
    raw = [np.asarray(params[n]) for n in step.param_names] + [cg.quantize(X, DT), cg.quantize(np.array(rows), DT)]
    wit = c.witness_raw(raw)
    bad = c.r1cs.failing(wit.values)
    assert len(bad) and {c.r1cs.tag_of(int(r)).split(":")[-1] for r in bad} <= {"targets.one_hot",
                                                                                  "targets.row_sum"}
    assert failing in {c.r1cs.tag_of(int(r)).split(":")[-1] for r in bad}
    # targets='any' proves soft targets
    _, soft = _circuit(field=zk.BN254, targets="any")
    assert soft.check(soft.witness(params, X, np.array([[0.5, 0.5], [0, 1]])))


def test_target_option_defaults_and_errors():
    assert _circuit(loss=nn.mse)[1].targets == "any"
    assert _circuit()[1].targets == "one-hot"
    step, _ = _circuit()
    with pytest.raises(ValueError, match=r"^zk.compile: targets must be one of \['one-hot', 'any'\], got 'soft'$"):
        zk.compile(step, targets="soft")
    with pytest.raises(ValueError, match=r"^zk.compile: predict has no targets y; targets= applies to step"):
        zk.compile(step, function="predict", targets="any")
    assert zk.compile(step, function="predict").targets is None


def test_the_verifiers_work_is_bounded_by_the_circuit_not_the_prover(proved):
    """A prover may not choose parameters that make verification arbitrarily expensive."""
    from circuitgrad.backends.zk.systems.ligero import Params, choose
    from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare
    step, c, w, _ = proved
    r = c.r1cs
    # a small circuit may still need k = 1024; lookups count their tables' entries
    rows = max(r.n_wires, r.n_constraints, r.n_lookups + r.lookup_table_size, 1024)
    k = 2 << (rows - 1).bit_length()              # twice the largest k the circuit can use
    assert r.n_lookups > 0                        # over LIGERO51, ranges are lookups
    cells = prepare(r).contraction_cells           # and its products are proved by the contraction argument
    assert cells > 0
    big = zk.prove(c, w, params=Params(k, 150, 4 * k, 3, 3, contraction_sigma=3))
    with pytest.raises(zk.Reject, match=rf"^the proof's parameters \(k={k}, n={4 * k}, σ=3, σL=3, σC=3\) are larger than "
                                        rf"this circuit of {rows} rows can need"):
        zk.check(big, c, w.public)
    many = zk.prove(c, w, params=choose(r.n_wires, r.n_constraints, sigma=9, lookups=r.n_lookups, contractions=cells))
    with pytest.raises(zk.Reject, match=r"σ=9, σL=3, σC=3\) are larger than this circuit"):
        zk.check(many, c, w.public)
    p = choose(r.n_wires, r.n_constraints, lookups=r.n_lookups, contractions=cells)
    lots = zk.prove(c, w, params=Params(p.k, p.t, p.n, p.sigma, 9, contraction_sigma=p.contraction_sigma))
    with pytest.raises(zk.Reject, match=r"σL=9, σC=3\) are larger than this circuit .*σL ≤ 8\)"):
        zk.check(lots, c, w.public)


def test_the_digest_follows_the_statement_after_compilation():
    step, c = _circuit(targets="any")
    before = c.digest()
    c.targets = "one-hot"                          # claims a constraint its R1CS does not have
    assert c.digest() != before and c.digest() != _circuit()[1].digest()


def test_a_hand_built_constraint_system_has_a_statement_and_proves():
    """A circuit built with the Builder (no program, no model) still names what it proves."""
    from circuitgrad.backends.zk.circuits.r1cs import Builder
    b = Builder(zk.LIGERO51)
    out = b.alloc(1, "out")
    a, c = b.alloc(1, "a"), b.alloc(1)
    b.constrain([(a, 1)], [(a, 1)], [(c, 1)], "square")
    b.constrain([(c, 1)], [(0, 1)], [(out, 1)], "output")
    r = b.finish(1, 0, 1)
    circuit = zk.Circuit(r, None, None, "square", [], [], [], [], [], [], 0.0, None, DT, 34)
    assert circuit.statement().startswith("square [hand-built constraint system] in fixed(16,8) over ligero51: ")
    w = zk.Witness(circuit, np.array([1, 9, 3, 9]))
    assert zk.verify(zk.prove(circuit, w), circuit, w.public)
