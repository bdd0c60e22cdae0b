"""The soundness analysis a Ligero proof claims, and the conservative "classic" one.

The default parameters reach 100 bits by the Longfellow analysis (Cascudo et al. 2025); the classic
Ligero analysis (Ames et al., CCS 2017) gives them about 45 bits. ``soundness="classic"`` chooses
parameters that reach 100 bits by the classic bound; the proof's header and statement name the
analysis, and a verifier accepts only the one it asks for.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from fractions import Fraction

import numpy as np
import pytest
from conftest import run_cli, zk_step_circuit

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.systems import ligero
from circuitgrad.backends.zk.circuits import gf
from circuitgrad.backends.zk.systems.ligero import params as LP, proofio, protocol
from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare
from circuitgrad.backends.zk.systems.ligero.params import soundness_of, with_soundness
from circuitgrad.cli import main

UNKNOWN = ("unknown soundness bound 'clasic': choose 'longfellow' (the default: Cascudo et al. 2025) or "
           "'classic' (Ames et al. 2017, more conservative)")


# ------------------------------------------------------------------ the classic formula, computed independently
def _classic_bits_exact(k: int, t: int, n: int, sigma: int, divisor: int = 4, with_replacement: bool = False) -> float:
    """−log2 of the CCS 2017 bound, in exact rationals, minimised over every integer 0 ≤ e < d/divisor.

    ε(e) = ((e+1)/|F|)^σ + 2/|F|^σ  +  Pr[t columns avoid e errors]  +  Pr[t columns in e + deg(q)]
         + Pr[t columns in e + deg(h·Z_H)], with d = n − K + 1, K = k + t, deg bounds K + k and 2K.
    ``with_replacement``: the paper's (a/n)^t instead of the exact C(a, t)/C(n, t) of t distinct columns.
    """
    K = k + t
    d = n - K + 1
    F = gf.P

    def hit(a: int) -> Fraction:
        a = min(a, n)
        return Fraction(a, n) ** t if with_replacement else Fraction(math.comb(a, t), math.comb(n, t))
    best = None
    for e in range(0, d):
        if divisor * e >= d:
            break
        eps = (Fraction(e + 1, F) ** sigma + 2 * Fraction(1, F) ** sigma + hit(n - e) + hit(e + K + k)
               + hit(e + 2 * K))
        best = eps if best is None else min(best, eps)
    return -math.log2(best)


@pytest.fixture(scope="module")
def iris8():
    """The iris step of ``zk prove examples/iris.py`` (batch 8, 4-16-3, over the Ligero field: logUp ranges)."""
    return zk_step_circuit("iris", 8, [16], field=zk.LIGERO51)


def test_classic_bound_gives_the_iris_default_parameters_about_45_bits(iris8):
    c, _ = iris8
    pc = prepare(c.r1cs)
    p = LP.choose(pc.n_wires, pc.n_constraints, lookups=pc.n_lookups)
    assert (p.k, p.t, p.n, p.sigma, p.lookup_sigma, p.soundness) == (512, 162, 2048, 3, 3, "longfellow")
    longfellow = LP.soundness_bits(p, lookups=pc.n_lookups)
    assert 100 <= longfellow < 100.5                           # the review's "0.28 bits above the target"
    classic = LP.soundness_bits(p, lookups=pc.n_lookups, soundness="classic")
    exact = _classic_bits_exact(p.k, p.t, p.n, p.sigma)
    assert classic == pytest.approx(exact, abs=1e-6)          # the Fiat–Shamir term is negligible here
    assert -LP.classic_error(p, lookups=pc.n_lookups)[0] == pytest.approx(exact, abs=1e-6)
    assert 44 < classic < 46                                   # 44.49: "about 46" in the review
    # e < d/3 (the range later work extends Lemma 4.2 to) gains 0.3 bits; the review's "about 46" (45.8) is the
    # largest single term rather than the union bound
    assert _classic_bits_exact(p.k, p.t, p.n, p.sigma, divisor=3) == pytest.approx(44.81, abs=0.01)
    # ... and the paper's (1 − e/n)^t form, sampling columns with replacement, is more pessimistic still
    assert _classic_bits_exact(p.k, p.t, p.n, p.sigma, with_replacement=True) < classic


@pytest.mark.parametrize("cells, lookups", [(300, 0), (80_000, 0), (6780, 4902), (424_010, 105_373)])
def test_classic_parameters_reach_100_bits_by_the_classic_bound(cells, lookups):
    default = LP.choose(cells, cells, lookups=lookups)
    classic = LP.choose(cells, cells, lookups=lookups, soundness="classic")
    assert classic.soundness == "classic" and default.soundness == "longfellow"
    assert LP.soundness_bits(default, lookups=lookups) >= 100                          # Longfellow
    assert LP.soundness_bits(default, lookups=lookups, soundness="classic") < 50       # but not classic
    bits = LP.soundness_bits(classic, lookups=lookups)
    assert bits >= 100 and bits == LP.soundness_bits(classic, lookups=lookups, soundness="classic")
    assert LP.soundness_bits(classic, lookups=lookups, soundness="longfellow") >= 100  # classic ⇒ Longfellow here
    assert LP.soundness_bits(dataclasses.replace(classic, t=classic.t - 1), lookups=lookups) < 100   # t is the least
    classic.validate()
    assert classic.n <= 8 * classic.k and classic.t <= classic.k                       # what a verifier accepts


def test_classic_bits_match_the_exact_formula_on_small_codes():
    for k, t, n, s in ((64, 40, 512, 3), (128, 60, 1024, 2), (256, 100, 2048, 3)):
        p = LP.Params(k, t, n, s, soundness="classic")
        assert -LP.classic_error(p)[0] == pytest.approx(_classic_bits_exact(k, t, n, s), abs=1e-6)


def test_unknown_soundness_names_are_refused_with_one_message(iris8):
    c, wit = iris8
    for call in (lambda: zk.prove(c, wit, soundness="clasic"), lambda: LP.choose(100, 100, soundness="clasic"),
                 lambda: LP.Params(16, 8, 64, 1, soundness="clasic").validate(),
                 lambda: ligero.verify(None, c, soundness="clasic"), lambda: LP.check_soundness("clasic")):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == UNKNOWN
    with pytest.raises(ValueError, match=r"^ligero\.prove: the parameters were chosen for the 'longfellow' "
                                         r"soundness bound, but soundness='classic'$"):
        zk.prove(c, wit, soundness="classic", params=LP.Params(512, 162, 2048, 3, 3))


# ------------------------------------------------------------------ end to end on a small circuit
@pytest.fixture(scope="module")
def small():
    c, wit = zk_step_circuit("iris", 2, [4], field=zk.LIGERO51)
    classic = zk.prove(c, wit, soundness="classic", rng=np.random.default_rng(1))
    default = zk.prove(c, wit, rng=np.random.default_rng(2))
    return c, wit, classic, default


def test_a_classic_proof_verifies_and_says_so(small):
    c, wit, proof, _ = small
    assert proof.params.soundness == "classic" and proof.soundness_bits >= 100
    assert proof.header()["soundness"] == "classic"
    assert proof.statement == with_soundness(c.statement(), "classic") != c.statement()
    assert soundness_of(proof.statement, c.statement()) == "classic"
    assert "classic soundness bound (Ames et al., CCS 2017)" in proof.statement
    assert zk.verify(proof, c, wit.public, soundness="classic")
    back = proofio.loads(proofio.dumps(proof))                  # the file keeps the claim
    assert back.params == proof.params and zk.verify(back, c, wit.public, soundness="classic")


def test_default_proofs_are_unchanged(small):
    c, wit, _, proof = small
    assert "soundness" not in proof.header() and proof.statement == c.statement()
    assert soundness_of(proof.statement, c.statement()) == "longfellow"
    assert zk.verify(proof, c, wit.public) and zk.verify(proof, c, wit.public, soundness="longfellow")


def test_a_verifier_accepts_only_the_analysis_it_asks_for(small):
    c, wit, classic, default = small
    with pytest.raises(zk.Reject, match=r"^the proof's parameters claim the 'longfellow' soundness bound, but the "
                                        r"verifier requires 'classic': prove with soundness='classic'"):
        zk.check(default, c, wit.public, soundness="classic")
    with pytest.raises(zk.Reject, match=r"^the proof's parameters claim the 'classic' soundness bound, but the "
                                        r"verifier requires 'longfellow'"):
        zk.check(classic, c, wit.public)
    assert not zk.verify(default, c, wit.public, soundness="classic")
    assert not zk.verify(classic, c, wit.public)


def test_a_classic_claim_on_weak_parameters_is_refused(small):
    c, wit, _, default = small
    weak = dataclasses.replace(default.params, soundness="classic")        # the default parameters, relabelled
    assert LP.soundness_bits(weak, lookups=default.lookups) < 100
    honest = zk.prove(c, wit, params=weak, soundness="classic", rng=np.random.default_rng(3))
    want = ligero.expected_params(c, soundness="classic")
    # parameters other than the verifier's own are refused first, before any work follows from their sizes
    refused = (rf"^the proof's parameters \({re.escape(protocol._show(weak))}\) are not the ones this circuit and "
               rf"100 bits give \({re.escape(protocol._show(want))}\): a verifier's work must not be the prover's "
               rf"choice$")
    relabelled = protocol.LigeroProof(**{**default.__dict__, "params": weak,    # header edited, nothing re-proved
                                         "statement": with_soundness(c.statement(), "classic")})
    for proof in (honest, relabelled):
        with pytest.raises(zk.Reject, match=refused):
            zk.check(proof, c, wit.public, soundness="classic")
        # parameters the verifier names itself must still reach the target by the bound they claim
        with pytest.raises(zk.Reject, match=r"^the proof's parameters \(k=512, t=162, n=2048, σ=3, σL=3\) give "
                                            r"[0-9.]+ bits of soundness by the classic bound, below the required "
                                            r"100$"):
            ligero.check(proof, c, wit.public, soundness="classic", params=weak)


def test_a_classic_proof_relabelled_as_default_is_refused(small):
    c, wit, classic, _ = small
    forged = protocol.LigeroProof(**{**classic.__dict__, "params": dataclasses.replace(classic.params,
                                                                                     soundness="longfellow")})
    assert not zk.verify(forged, c, wit.public)
    forged.statement = c.statement()
    assert not zk.verify(forged, c, wit.public)


def test_the_file_names_only_a_known_non_default_analysis(small):
    _, _, proof, _ = small
    for bad in ("longfellow", "bogus"):       # the default is written by leaving the key out: one encoding
        p = protocol.LigeroProof(**{**proof.__dict__})
        p.header = (lambda h=proof.header(), v=bad: {**h, "soundness": v})
        with pytest.raises(zk.FormatError, match=r"header field 'soundness' must be one of \['classic'\]"):
            proofio.loads(proofio.dumps(p))


# ------------------------------------------------------------------ the command line
IRIS = ["examples/iris.py", "--batch", "2", "--option", "momentum=0"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _verify(capsys, proofs: str, *extra: str) -> tuple[int, str]:
    os.chdir(ROOT)
    try:
        rc = main(["zk", "verify", *IRIS, proofs, "--init-seed", "0", *extra])
    except SystemExit as e:
        return 1, str(e.code)
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_cli_classic_bundle_needs_a_classic_verifier(tmp_path, capsys):
    out = str(tmp_path / "classic")
    res = run_cli("zk", "prove", *IRIS, "--steps", "1", "--out", out, "--soundness", "classic")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "by the classic bound" in res.stdout and "Ligero parameters meet the classic soundness bound" in res.stdout
    chain = json.load(open(os.path.join(out, "chain.json")))
    assert chain["options"]["soundness"] == "classic" and chain["statement"].endswith("(Ames et al., CCS 2017)")
    rc, text = _verify(capsys, out, "--soundness", "classic")
    assert rc == 0 and "all 1 proofs verify" in text, text
    rc, text = _verify(capsys, out)                 # said once, before any proof is read (no per-step errors)
    assert (rc, text) == (1, f"[compile] …\n{text.splitlines()[1]}\n{out}: the bundle claims the classic soundness "
                             f"bound, you require longfellow: verify with --soundness classic\nVERIFICATION FAILED\n")
    assert text.splitlines()[1].startswith("[compile] done in ")
    default = str(tmp_path / "default")              # and the reverse
    res = run_cli("zk", "prove", *IRIS, "--steps", "2", "--out", default)
    assert res.returncode == 0, res.stdout + res.stderr
    rc, text = _verify(capsys, default, "--soundness", "classic")
    assert (rc, text.splitlines()[2:]) == (1, [f"{default}: the bundle claims the longfellow soundness bound, you "
                                               f"require classic: verify with --soundness longfellow",
                                               "VERIFICATION FAILED"])
    assert "INVALID" not in text and "step_00" not in text


def test_cli_refuses_unknown_or_misplaced_soundness(tmp_path, capsys):
    os.chdir(ROOT)
    with pytest.raises(SystemExit) as e:
        main(["zk", "prove", *IRIS, "--soundness", "clasic", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "invalid choice: 'clasic'" in capsys.readouterr().err


# ------------------------------------------------------------------ private runs pass it through
def test_private_run_with_classic_soundness(tmp_path):
    x = np.round(np.random.default_rng(0).uniform(-2, 2, (8, 3)) * 256) / 256
    y = np.random.default_rng(1).integers(0, 2, 8)
    step = cg.compile_model(nn.mlp(2, [3, 2, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=cg.fixed(16, 8))
    data = zk.commit_dataset(step, x, y)
    run = zk.prove_run(step, step.init_params(seed=0), [(x[:2], y[:2])], dataset=data, cluster="serial",
                       progress=False, rng=np.random.default_rng(5), soundness="classic")
    assert run.proofs[0].params.soundness == "classic" and run.statement.endswith("(Ames et al., CCS 2017)")
    c0 = run.commitments[0]
    assert zk.verify_run(run, step, c0=c0, d=data.commitment, soundness="classic")
    assert not zk.verify_run(run, step, c0=c0, d=data.commitment)
    with pytest.raises(zk.Reject, match=r"^the run claims the 'classic' soundness bound, but the verifier "
                                        r"requires 'longfellow'$"):
        zk.check_run(run, step, c0=c0, d=data.commitment)


@pytest.mark.parametrize("wires, constraints, lookups, contractions, bits", [
    (100, 89, 477, 100, 100), (5000, 4000, 0, 0, 100), (600_000, 300_000, 500_000, 8000, 100),
    (8_000_000, 5_000_000, 7_000_000, 50_000, 100), (5000, 4000, 477, 0, 80), (600_000, 300_000, 0, 0, 120)])
def test_choose_scans_from_a_bound_and_finds_what_a_full_scan_finds(wires, constraints, lookups, contractions, bits):
    """The Longfellow error is not monotone in t (K = k + t grows with it), so ``choose`` scans up from a lower
    bound instead of from 8: it must pick exactly the parameters of the scan from 8 (a verifier derives them)."""
    fb = math.log2(gf.P)
    best = None
    for logk in range(5, 15):
        k, n = 1 << logk, 4 << logk
        s = max(1, math.ceil((bits + 1) / (fb - math.log2(n + 2))))

        def mk(t):
            return LP.Params(k, t, n, s, LP.lookup_sigma(lookups, bits), "longfellow",
                             LP.contraction_sigma(contractions, bits))
        top = min(k, (n + 1) // 2 - k, n // 2 - 1)
        t = next((t for t in range(8, top + 1) if LP.meets(mk(t), bits, lookups, contractions=contractions)), None)
        if top >= 8 and t is not None:
            cost = LP.proof_bytes(mk(t), wires, constraints, lookups, contractions)
            best = min(best, (cost, mk(t)), key=lambda c: c[0]) if best else (cost, mk(t))
    assert LP.choose(wires, constraints, bits, lookups=lookups, contractions=contractions) == best[1]
