"""The public statement of a circuit: what a verified proof claims, named in full.

A proof of a training step claims *"there is a private batch for which this
step, in exactly this arithmetic, takes the public parameters before to the
public parameters after"*. :func:`describe` names everything that claim
depends on:

* the function (``step``/``predict``) and the model, with the SHA-256 of the
  exact SSA program (every operation and every constant);
* the loss and the optimizer, with each optimizer constant both as written
  (``lr=0.05``) and as the raw fixed-point integer the circuit multiplies by;
* the dtype, the field (name and prime), the batch shapes of ``x`` and ``y``
  and what the targets are constrained to (one-hot rows, or any values);
* the public outputs, public inputs and private inputs with their shapes,
  and the circuit's size.

:func:`digest` hashes this description together with the constraint system,
so a proof bound to the digest is bound to every item above.
:func:`params_sha256` names a set of parameters (raw fixed-point values) by
one hash, as the verifier prints for the first and last parameters of a run.

A Ligero proof's statement also names the soundness analysis its parameters were chosen for
(``ligero.params.with_soundness``, with the clauses of :data:`CLAIMS`): the default (Longfellow) analysis
adds nothing, so those statements are the circuit's own, as before; ``"classic"`` appends a clause naming
the classic Ligero bound. ``ligero.params.soundness_of`` reads the claim back, and the verifier refuses a
claim weaker than the one it requires.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Mapping, Sequence

import numpy as np

from circuitgrad.fixedpoint import const
from circuitgrad.schedule import Program

from .tables import FUNCTION_TABLE

__all__ = ["describe", "render", "block", "digest", "r1cs_digest", "program_sha256", "params_sha256", "CLAIMS",
           "DEFAULT_CLAIM", "TARGETS"]

#: what ``zk.compile(..., targets=...)`` may constrain the targets ``y`` to
TARGETS = ("one-hot", "any")


def _known() -> dict[str, str]:
    from .field import BN254, LIGERO51
    return {f.name: str(f.p) for f in (BN254, LIGERO51)}


_KNOWN = _known()


def program_sha256(prog: Program) -> str:
    """SHA-256 of the SSA program: input and output types, every operation with its constants."""
    h = hashlib.sha256(b"circuitgrad-program-v1\n")
    h.update(repr([prog.types[v] for v in prog.inputs]).encode())
    for a in prog.instrs:
        h.update(f"\n{a.op!r}{list(a.args)}{list(a.results)}".encode())
    h.update(f"\nreturn {list(prog.outputs)}".encode())
    return h.hexdigest()


def _optimizer(opt, dtype) -> dict[str, Any]:
    """The optimizer's kind and constants, each as written and as its raw fixed-point value."""
    consts = {}
    for f in dataclasses.fields(opt):
        v = getattr(opt, f.name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v:
            consts[f.name] = {"value": float(v), "raw": int(const(v, dtype, f"optimizer {f.name}"))}
    return {"name": opt.name.split("(")[0], "constants": consts}


def describe(circuit) -> dict[str, Any]:
    """The statement as plain data (JSON-serialisable, canonical)."""
    def shapes(names: Sequence[str], wires) -> list:
        return [[n, list(w.shape)] for n, w in zip(names, wires)]
    ins = list(zip(circuit.input_names, circuit.input_wires))
    m = circuit.model
    d: dict[str, Any] = {
        "function": circuit.function,
        "model": m.model.name if m is not None else None,
        "program_sha256": program_sha256(circuit.program) if circuit.program is not None else None,
        "loss": getattr(m.loss_fn, "__name__", repr(m.loss_fn)) if m is not None else None,
        "optimizer": _optimizer(m.optimizer, circuit.dtype) if m is not None and circuit.function == "step"
        else None,
        "dtype": str(circuit.dtype),
        "field": {"name": circuit.field.name, "p": str(circuit.field.p)},
        "targets": circuit.targets,
        "public_outputs": shapes(circuit.output_names, circuit.output_wires),
        "public_inputs": [[n, list(w.shape)] for n, w in ins if n in circuit.public_inputs],
        "private_inputs": [[n, list(w.shape)] for n, w in ins if n not in circuit.public_inputs],
        "constraints": int(circuit.r1cs.n_constraints),
        "wires": int(circuit.r1cs.n_wires),
    }
    if circuit.r1cs.L is not None:
        d["lookups"] = int(circuit.r1cs.n_lookups)
        r = circuit.r1cs
        d["lookup_tables"] = {"widths": [b for b in r.lookup_tables if b < FUNCTION_TABLE],
                              "limb_bits": int(r.table_bits)}
        if r.function_tables:   # fused elementwise regions: what each table computes and its entries
            d["lookup_tables"]["functions"] = [[name, len(t)] for name, t in zip(r.function_names, r.function_tables)]
    if circuit.r1cs.contractions:       # absent: every product is one constraint per multiply-accumulate
        d["contractions"] = {"count": len(circuit.r1cs.contractions),
                             "terms": int(circuit.r1cs.n_contraction_terms),
                             "proved_by": "the native prover's contraction argument (Freivalds' check)"}
    lay = getattr(circuit, "private", None)
    if lay is not None:                     # a private step: digests are public, every input is private
        c = [lay.capacity]
        d["public_outputs"] = [["commitment_after", c]]
        d["public_inputs"] = [["commitment_before", c], ["data_root", c]]
        d["private_inputs"] = [[n, list(w.shape)] for n, w in ins] + lay.private_inputs()
        d["commitments"] = lay.describe(circuit.field)
    return d


def render(d: Mapping[str, Any]) -> str:
    """One readable line: the text saved in every proof and printed by the CLI."""
    def listing(items) -> str:
        return ", ".join(f"{n}{s}" for n, s in items) or "none"

    def count(items) -> int:
        return sum(int(np.prod(s, dtype=np.int64)) for _, s in items)
    what = d["function"] + (f" of {d['model']}" if d["model"] else "")
    head = f"{what} [program sha256 {d['program_sha256'][:16]}]" if d["program_sha256"] else \
        f"{what} [hand-built constraint system]"
    if d["loss"]:
        head += f", loss {d['loss']}"
    if d["optimizer"]:
        c = ", ".join(f"{k}={v['value']:g} (raw {v['raw']})" for k, v in d["optimizer"]["constants"].items())
        head += f", optimizer {d['optimizer']['name']}({c})"
    private = listing(d["private_inputs"])
    if d["targets"] == "one-hot":
        private += " (targets y: one-hot rows)"
    elif d["targets"] == "any":
        private += " (targets y: any in-range values)"
    if "commitments" in d:
        cm = d["commitments"]
        private += (f"; commitments {cm['hash']} to {', '.join(cm['committed'])} ({cm['packing']}) with "
                    f"{cm['blinding']} blinding elements; batch rows from a dataset of {cm['data_rows']} rows "
                    f"(ternary Merkle tree, depth {cm['merkle_depth']})")
    fld = d["field"]["name"] if _KNOWN.get(d["field"]["name"]) == d["field"]["p"] else \
        f"{d['field']['name']} (p = {d['field']['p']})"
    return (f"{head} in {d['dtype']} over {fld}: "
            f"public outputs ({count(d['public_outputs'])} values): {listing(d['public_outputs'])}; "
            f"public inputs ({count(d['public_inputs'])} values): {listing(d['public_inputs'])}; "
            f"private: {private}; {d['constraints']} constraints, {d['wires']} wires"
            + (_lookups(d) if "lookups" in d else "")
            + (f", {d['contractions']['count']} contractions ({d['contractions']['terms']} terms) proved by "
               f"Freivalds' check" if "contractions" in d else ""))


def block(d: Mapping[str, Any], soundness: str | None = None, title: str = "statement", width: int = 100) -> str:
    """The statement :func:`render` writes on one line, as an indented block for people: a title line naming the
    function, the model and its program, then one claim per line (loss, optimizer, arithmetic, each group of
    values, commitments, size, soundness), long lists wrapped at ``width``. ``soundness``: the analysis the
    proof's parameters meet (a key of :data:`CLAIMS`, or the default); None for a system that names none. Only
    printed: what a proof binds is :func:`render`'s text (and :func:`describe`'s data in the digest)."""
    def count(items) -> int:
        return sum(int(np.prod(s, dtype=np.int64)) for _, s in items)

    what = d["function"] + (f" of {d['model']}" if d["model"] else "")
    program = f"program sha256 {d['program_sha256'][:16]}" if d["program_sha256"] else "hand-built constraint system"
    claims: list[tuple[str, str]] = []
    if d["loss"]:
        claims.append(("loss", d["loss"]))
    if d["optimizer"]:
        c = ", ".join(f"{k}={v['value']:g} (raw {v['raw']})" for k, v in d["optimizer"]["constants"].items())
        claims.append(("optimizer", f"{d['optimizer']['name']}({c})"))
    fld = d["field"]["name"] if _KNOWN.get(d["field"]["name"]) == d["field"]["p"] else \
        f"{d['field']['name']} (p = {d['field']['p']})"
    claims.append(("arithmetic", f"{d['dtype']} over {fld}"))
    for key, label in (("public_outputs", "public outputs"), ("public_inputs", "public inputs")):
        claims.append((label, f"{count(d[key])} values: {_items(d[key])}"))
    claims.append(("private", _items(d["private_inputs"])))
    if d["targets"] in ("one-hot", "any"):
        claims.append(("targets y", "one-hot rows" if d["targets"] == "one-hot" else "any in-range values"))
    if "commitments" in d:
        cm = d["commitments"]
        claims.append(("commitments", f"{cm['hash']} to {', '.join(cm['committed'])} ({cm['packing']}) with "
                                      f"{cm['blinding']} blinding elements"))
        claims.append(("batch rows", f"from a dataset of {cm['data_rows']} rows (ternary Merkle tree, depth "
                                     f"{cm['merkle_depth']})"))
    claims.append(("size", f"{d['constraints']} constraints, {d['wires']} wires"))
    if "lookups" in d:
        claims.append(("lookups", f"{d['lookups']} into {_tables(d)}"))
    if "contractions" in d:
        claims.append(("contractions", f"{d['contractions']['count']} ({d['contractions']['terms']} terms) proved "
                                       f"by Freivalds' check"))
    if soundness is not None:
        claims.append(("soundness", CLAIMS.get(soundness, DEFAULT_CLAIM)[2:]))
    pad = max(len(k) for k, _ in claims) + 2
    lines = [f"{title}: {what} [{program}]"]
    for k, v in claims:
        lines += _wrap(f"  {k + ':':<{pad}}", v, width)
    return "\n".join(lines)


def _items(items) -> str:
    return ", ".join(f"{n}{s}" for n, s in items) or "none"


def _wrap(head: str, text: str, width: int) -> list[str]:
    """``head`` and ``text``, cut after a ", " that is not inside brackets where a line would pass ``width``;
    the next lines are indented under the text."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "[(") - (ch in "])")
        if ch == "," and depth == 0 and text[i + 1:i + 2] == " ":
            parts.append(text[start:i + 1])
            start = i + 2
    parts.append(text[start:])
    lines, line = [], head
    for part in parts:
        if line.strip() and line != head and len(line) + 1 + len(part) > width:
            lines.append(line.rstrip())
            line = " " * len(head)
        line += ("" if line.strip() == "" or line == head else " ") + part
    return lines + [line]


def _lookups(d: Mapping[str, Any]) -> str:
    return f", {d['lookups']} lookups into {_tables(d)}"


def _tables(d: Mapping[str, Any]) -> str:
    t = d.get("lookup_tables") or {"widths": [8], "limb_bits": 8}
    fn = t.get("functions") or []
    return ", ".join(f"[0, 2^{w})" for w in t["widths"]) + f" (limbs of {t['limb_bits']} bits)" + (
        f" and {len(fn)} function tables of {sum(n for _, n in fn):,} entries" if fn else "")


def digest(circuit) -> bytes:
    """SHA-256 binding the constraint system and the whole statement (see the module docstring).

    Computed from the statement as it is now (the R1CS part is cached with the R1CS), so changing a
    circuit's model or targets after compiling cannot leave a stale digest behind.
    """
    h = hashlib.sha256(b"circuitgrad-circuit-v1")
    h.update(r1cs_digest(circuit.r1cs))
    h.update(json.dumps(describe(circuit), sort_keys=True).encode())
    return h.digest()


#: terms hashed at a time by :func:`r1cs_digest`
_HASH_BLOCK = 1 << 20


def r1cs_digest(r) -> bytes:
    """SHA-256 of the constraint system ``r`` (sizes, every matrix's CSR arrays, the lookup matrix, limb width
    and every lookup's table if it has lookups, every contraction's wire tensors if it has any); independent of
    the field. Computed once per R1CS (kept on it, beside the prover's prepared circuit)."""
    cached = getattr(r, "_digest", None)
    if cached is not None:
        return cached
    if r.counted:                               # what the native prover says of it (it prepares first)
        raise ValueError("ligero: this circuit was counted, not built (zk.compile(..., count_only=True)): it has "
                         "no constraint matrices to prove; compile it without count_only")
    h = hashlib.sha256(b"circuitgrad-r1cs-v1")
    h.update(np.array([r.n_wires, r.n_pub_out, r.n_pub_in, r.n_prv_in, r.n_constraints], dtype="<i8").tobytes())
    mats = (r.A, r.B, r.C)
    if r.L is not None:
        h.update(b"lookups")
        h.update(np.array([r.n_lookups, r.table_bits], dtype="<i8").tobytes())
        for lo in range(0, r.n_lookups, _HASH_BLOCK):                          # every lookup's table
            h.update(np.ascontiguousarray(r.lookup_keys(lo, lo + _HASH_BLOCK), dtype="<i8").tobytes())
        for t in r.function_tables:                                             # and every function table
            h.update(np.array([len(t)], dtype="<i8").tobytes() + np.ascontiguousarray(t, dtype="<i8").tobytes())
        mats += (r.L,)
    for m in mats:
        h.update(np.ascontiguousarray(m.ptr, dtype="<i8").tobytes())
        for get in (lambda lo, hi: m.wires[lo:hi], m.coeffs_of):       # a block of terms at a time
            for lo in range(0, len(m.wires), _HASH_BLOCK):
                h.update(np.ascontiguousarray(get(lo, lo + _HASH_BLOCK), dtype="<i8").tobytes())
    if r.contractions:
        h.update(b"contractions")
        h.update(np.array([len(r.contractions)], dtype="<i8").tobytes())
        for c in r.contractions:
            for arr in (c.a, c.b, c.c):
                h.update(np.array(arr.shape, dtype="<i8").tobytes())
                h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    r._digest = h.digest()
    return r._digest


def params_sha256(names: Sequence[str], arrays: Sequence[np.ndarray]) -> str:
    """SHA-256 of named raw fixed-point parameters (name, shape and little-endian int64 values of each)."""
    h = hashlib.sha256(b"circuitgrad-params-v1")
    for n, a in zip(names, arrays, strict=True):
        a = np.asarray(a, dtype=np.int64)
        h.update(json.dumps([n, list(a.shape)]).encode())
        h.update(np.ascontiguousarray(a, dtype="<i8").tobytes())
    return h.hexdigest()


#: the clause a proof's statement adds for each soundness analysis of its Ligero parameters but the default
#: (``ligero.params.with_soundness``), which adds none
CLAIMS = {"classic": "; Ligero parameters meet the classic soundness bound (Ames et al., CCS 2017)"}
#: what :func:`block` says of the default analysis (which the statement leaves unsaid)
DEFAULT_CLAIM = "; Ligero parameters meet the Longfellow soundness bound (Cascudo et al. 2025)"
