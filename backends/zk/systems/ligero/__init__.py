"""The native transparent prover: Ligero over a 51-bit NTT-friendly prime, in NumPy.

    from circuitgrad.backends import zk
    proof = zk.prove(circuit, wit, system="ligero")     # no setup, no Node.js
    assert zk.verify(proof, circuit, wit.public)
    proof.save("step.proof"); zk.Proof.load("step.proof")

A circuit is proved over ``F_p`` with ``p = 262139·2^33 + 1``, whatever field it
was compiled for. Its constraints have small integer coefficients, and they
are sound over any prime above ``2^circuit.required_bits``. :func:`prove`
refuses circuits that need more than this field has (for example width 32),
and names the widths that fit. See ``docs/ZK.md`` for the protocol, the
soundness bound and the zero-knowledge argument.
"""
from __future__ import annotations

import json
import time
from typing import Callable, Sequence

import numpy as np

from ...circuits import gf
from . import ntt as transforms
from .circuitdata import prepare
from .params import (DEFAULT_SOUNDNESS, SOUNDNESS, TARGET_BITS, Params, check_soundness, choose, classic_error,
                     round_errors, soundness_bits, TABLE, with_soundness)
from .proofio import FormatError, load, loads, max_bytes
from .protocol import LigeroProof, Reject, layout, expected_params as _expected, verify_prepared
from .prover import Watermark, prove_prepared

__all__ = ["prove", "verify", "check", "LigeroProof", "Params", "choose", "soundness_bits", "round_errors",
           "classic_error", "SOUNDNESS", "DEFAULT_SOUNDNESS",
           "TARGET_BITS", "FIELD_BITS", "load", "loads", "Reject", "FormatError", "expected_params",
           "max_proof_bytes"]

#: usable bits: circuits need ``p > 2^required_bits``
FIELD_BITS = gf.P.bit_length() - 1


def _check_fits(circuit) -> None:
    need = getattr(circuit, "required_bits", None)
    if not need:
        raise ValueError(f"ligero: circuit {circuit.function!r} does not say how many bits its constraints need "
                         f"(required_bits); circuits from zk.compile do, a hand-built one must set it")
    if need > FIELD_BITS:
        raise ValueError(
            f"ligero: {circuit.function} in {circuit.dtype} needs a prime above 2^{need} so that no constraint wraps "
            f"around, but the Ligero field has {gf.P.bit_length()} bits (p = {gf.P}); use a narrower fixed-point "
            f"format (fixed(16, 8) needs about 2·16 + log2(inner dimension) + 2 bits) or system='groth16'")


def _signed_public(circuit, public: Sequence[int]) -> np.ndarray:
    """Public values as integers: canonical field elements of the circuit's field, lifted to (−p/2, p/2].

    A value outside ``[0, p)`` is refused (``v + p`` would otherwise prove the statement about ``v``).
    The statement is about the lifted integers. One outside ``(−P/2, P/2)`` (``P`` the Ligero prime)
    would alias another one modulo ``P``, so it is refused rather than reduced.
    """
    pc = circuit.field.p
    out = [int(v) for v in public]
    bad = next((i for i, v in enumerate(out) if not 0 <= v < pc), None)
    if bad is not None:
        raise Reject(f"public value {bad} ({out[bad]}) is not a canonical element of {circuit.field} "
                     f"(it must lie in [0, p))")
    lifted = [v - pc if v > pc // 2 else v for v in out]
    bad = next((i for i, v in enumerate(lifted) if not -(gf.P // 2) < v < gf.P // 2), None)
    if bad is not None:
        raise Reject(f"public value {bad} ({lifted[bad]}) is outside the range the Ligero field represents "
                     f"without aliasing (|v| < {gf.P // 2})")
    return np.array(lifted, dtype=object)


def _digest(circuit) -> bytes | None:
    """The circuit's digest (constraints and statement), or None for a bare constraint system."""
    return circuit.digest() if hasattr(circuit, "digest") else None


def _statement(circuit, soundness: str) -> str:
    """The statement a proof makes: the circuit's, and the soundness analysis its parameters meet."""
    return with_soundness(circuit.statement(), soundness)


def prove(circuit, wit, params: Params | None = None, target_bits: float = TARGET_BITS,
          check: bool = True, rng: np.random.Generator | None = None,
          log: Callable[[str], None] | None = None, soundness: str = DEFAULT_SOUNDNESS, split=None,
          keep: int | None = None) -> LigeroProof:
    """A Ligero proof that ``wit`` satisfies ``circuit``.

    ``params`` default to :func:`choose` for ``target_bits`` under the ``soundness`` analysis
    (``"longfellow"``, the default, or the more conservative ``"classic"``; see ``docs/ZK.md``).
    The proof's header and statement name that analysis, and a verifier accepts the proof only
    when it asks for the same one. With ``check`` (the default), an unsatisfied witness raises
    ``UnsatisfiedConstraint`` naming the constraint, before any proving work starts. ``split`` shares the
    prover's passes among workers (``zk.prove(..., cluster=...)`` makes one); the proof's bytes are the same.
    ``keep`` (bytes) bounds what the prover keeps between its passes instead of computing it again
    (``prover.plan``; default: the encoded matrix up to 1 GiB); ``keep=0`` streams every row, in the least memory.
    """
    check_soundness(soundness)
    if params is not None and params.soundness != soundness:
        raise ValueError(f"ligero.prove: the parameters were chosen for the {params.soundness!r} soundness bound, "
                         f"but soundness={soundness!r}")
    _check_fits(circuit)
    values = wit.values if hasattr(wit, "values") else np.asarray(wit)
    if check:                                      # in this field's arithmetic, a block of rows at a time
        circuit.r1cs.assert_satisfied(values, lambda w: prepare(circuit.r1cs).failing(gf.reduce(w)))
    t0 = time.perf_counter()
    transforms.warm()                                      # the compiled kernels loaded before the proof's own memory
    # the memory the proof adds: preparing the circuit included, unless the witness check above prepared it
    mark = Watermark()
    pc = prepare(circuit.r1cs)
    p = params or _expected(pc, target_bits, soundness=soundness)     # choose(…) of the circuit's sizes, cached
    if log:
        lk = f", {pc.n_lookups} lookups" if pc.n_lookups else ""
        ct = f", {len(circuit.r1cs.contractions)} contractions" if pc.contraction_cells else ""
        sl = f" σL={p.lookup_sigma}" if pc.n_lookups else ""
        sc = f" σC={p.contraction_sigma}" if pc.contraction_cells else ""
        bits = soundness_bits(p, lookups=pc.n_lookups, contractions=pc.contraction_cells,
                              table=pc.lookup_table or TABLE)
        log(f"ligero: {pc.n_constraints} constraints, {pc.n_wires} wires{lk}{ct}; k={p.k} t={p.t} n={p.n} "
            f"σ={p.sigma}{sl}{sc} ({bits:.1f} bits by the {p.soundness} bound)")
    proof = prove_prepared(pc, values, p, _statement(circuit, p.soundness), circuit.r1cs.n_pub_out, rng=rng, log=log,
                           digest=_digest(circuit), split=split, keep=keep)
    proof.timings["prove"] = time.perf_counter() - t0
    added = mark.added()
    if added is not None:
        proof.timings["memory"] = float(added)
    return proof


def expected_params(circuit, min_bits: float = TARGET_BITS, soundness: str = DEFAULT_SOUNDNESS) -> Params:
    """The parameters :func:`prove` chooses for ``circuit``, ``min_bits`` and ``soundness``: the only ones
    :func:`check` accepts unless the verifier names others (``params=``)."""
    return _expected(prepare(circuit.r1cs), min_bits, soundness=check_soundness(soundness))


def max_proof_bytes(circuit, min_bits: float = TARGET_BITS, params: Params | None = None,
                    soundness: str = DEFAULT_SOUNDNESS) -> int:
    """The largest proof file of ``circuit`` that :func:`check` can accept (``params``: those it expects,
    by default :func:`expected_params`); pass it to :func:`load` so that reading costs no more either."""
    pc = prepare(circuit.r1cs)
    p = params or _expected(pc, min_bits, soundness=check_soundness(soundness))
    lay = layout(pc, p)
    probe = LigeroProof(p, _digest(circuit) or pc.digest, np.zeros(pc.n_public, dtype=np.int64),
                        circuit.r1cs.n_pub_out, _statement(circuit, p.soundness), b"", None, None, None, None, [], [],
                        lookups=pc.n_lookups, contractions=pc.contraction_cells, lookup_table=pc.lookup_table)
    header = json.dumps(probe.header(), sort_keys=True).encode()
    return max_bytes(p, header, pc.n_public, lay.rows, lay.second)


def check(proof: LigeroProof, circuit, public: Sequence[int] | None = None, min_bits: float = TARGET_BITS,
          params: Params | None = None, soundness: str = DEFAULT_SOUNDNESS) -> None:
    """Raise :class:`Reject` naming the first failed check (``public`` defaults to the proof's own).

    Besides the argument itself, the header must match the circuit: its public-output count
    (which the chain of training steps relies on) and its statement. The proof's parameters must be
    ``params``, by default :func:`expected_params` (those :func:`prove` chooses for ``min_bits``).
    ``soundness`` is the analysis the verifier requires (``"longfellow"`` or ``"classic"``): the proof
    must claim exactly it, in its header and its statement, and its parameters must reach ``min_bits``
    by it.
    """
    check_soundness(soundness)
    _check_fits(circuit)
    if not isinstance(proof, LigeroProof):
        raise Reject(f"not a Ligero proof: {type(proof).__name__}")
    claimed = getattr(proof.params, "soundness", None)
    if claimed != soundness:
        other = f", or verify with soundness={claimed!r} if that bound is enough for you" if claimed in SOUNDNESS \
            else ""
        raise Reject(f"the proof's parameters claim the {claimed!r} soundness bound, but the verifier requires "
                     f"{soundness!r}: prove with soundness={soundness!r} (zk prove --soundness {soundness}){other}")
    pub = proof.public if public is None else gf.reduce(_signed_public(circuit, public))
    verify_prepared(prepare(circuit.r1cs), proof, pub, min_bits, _statement(circuit, soundness), _digest(circuit),
                    params)


def verify(proof: LigeroProof, circuit, public: Sequence[int] | None = None, min_bits: float = TARGET_BITS,
           params: Params | None = None, soundness: str = DEFAULT_SOUNDNESS) -> bool:
    """True when ``proof`` proves ``circuit`` for ``public`` (the statement's values, as ``wit.public``).

    A malformed proof object (wrong types or shapes) is invalid too: it returns False. An unknown
    ``soundness`` is the caller's error: it raises ValueError.
    """
    check_soundness(soundness)
    try:
        check(proof, circuit, public, min_bits, params, soundness)
        return True
    except (Reject, ValueError, TypeError, IndexError, AttributeError):
        return False
