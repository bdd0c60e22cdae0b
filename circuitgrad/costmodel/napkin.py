"""Attention on a napkin: an analytic HBM-transfer (IO) model of one attention head.

Four algorithms for ``O = norm(Q Kᵀ/√d) V`` (``Q, K, V, O : N×d``), forward or forward+backward,
optionally causal, counted in elements moved between HBM and an on-chip memory of ``M`` elements:

* softmax / spherical, *materialised*: one kernel per step, every ``N×N`` intermediate written to
  and read back from HBM (FlashAttention, Dao et al. 2022, arXiv:2205.14135, Algorithm 0 and the
  standard backward, Algorithm 3 of its Appendix B).  Each kernel reads its operands once and writes
  its result once (the idealised GEMM of that paper's Theorem 2); a causal mask is generated from
  indices inside the softmax/normalise kernel, so it changes no transfer and no matmul.
* softmax / spherical, *streaming*: FlashAttention-2 (Dao 2023, arXiv:2307.08691) Algorithm 1
  (forward, outer loop over query blocks so ``O`` is written once) and Algorithm 2 (backward,
  outer loop over key/value blocks, ``D = rowsum(dO∘O)`` precomputed, ``dQ_i`` read and written
  back for every visited block pair as FA-2's atomic adds do, after a zero fill of ``dQ``).  Blocks
  entirely above the diagonal are skipped when causal (FA-2 §3.1, causal masking).  Spherical
  attention streams the same way with no running maximum and no rescaling; ``r = 1/√(Σs²+ε)`` replaces the
  logsumexp ``L`` as the saved per-row statistic (``⟨da, a⟩ = dO·O = D``, so the backward is the
  same loop).  This is the streaming derivation of Abbott & Zardini, "FlashAttention on a Napkin"
  (TMLR 2025, arXiv:2412.03317), written as loops rather than diagrams::

      for each query block Q_i (Br rows)                 HBM --Q_i-------------> chip
        acc = 0 (Br×d);  softmax: m = -inf, l = 0  |  spherical: q = 0   (state per row: 2 | 1)
        for each key block j, skipping j above the diagonal   HBM --K_j, V_j---> chip
          S = Q_i K_jᵀ/√d                          (Br×Bc, never leaves the chip)
          softmax:   m' = max(m, rowmax S);  P = exp(S - m')
                     l = e^(m-m') l + rowsum P;   acc = e^(m-m') acc + P V_j   <- rescale
          spherical: q = q + rowsum S²;           acc = acc + S V_j            (no rescale)
        softmax: O_i = acc / l, L_i = m + log l  |  spherical: r_i = 1/√(q+ε), O_i = r_i acc
        chip --O_i, L_i | r_i--> HBM

Tiles (:func:`tiles`) follow FlashAttention's rule, Algorithm 1 line 1: the block of the operand
held on chip through the inner loop has ``⌈M/4d⌉`` rows, the streamed block ``min(⌈M/4d⌉, d)``.
FA-1 and FA-2's backward hold K/V (outer loop), so ``Br = min(⌈M/4d⌉, d)``, ``Bc = ⌈M/4d⌉``;
FA-2's forward holds Q, so there the roles swap (FA-2's kernels likewise take query blocks at least
as large as key blocks: ``kBlockM = kBlockN = 128`` for d = 64 in ``flash_fwd_launch_template.h``).
Keeping ``Br ≤ d`` for the *outer* query block would re-read K/V ``N/d`` times and give Θ(N²)
rather than Theorem 2's Θ(N²d²/M) once ``M > 4d²``.

Counting rules.  ``reads``/``writes``: elements HBM→chip / chip→HBM.  ``matmul_flops``: ``2mnk``
per ``m×k·k×n`` product done (partial edge tiles at their true size, skipped tiles not at all).
``other_flops``: one per element per elementwise operation, one per element reduced by a row
max/sum, one per row per per-row scalar operation; the ``1/√d`` scale costs one per score and one
per score gradient; mask selects are free.  ``transcendentals`` (exp, log, sqrt; included in
``other_flops``).  ``rescales``: accumulator elements multiplied by ``e^(m-m')`` (none on the first
visited key block of a query block, where the accumulator is still zero).  ``state_per_row``:
scalars per query row carried across key blocks on chip.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

__all__ = ["H100_SMEM_BYTES", "H100_M_FP32", "KINDS", "ALGORITHMS", "AttentionIO", "tiles",
           "attention_io", "closed_form", "reference", "plot"]

#: Shared memory one H100 thread block can address: 227 KiB (228 KiB per SM, CUDA reserves 1 KiB
#: per block) -- NVIDIA Hopper Tuning Guide (shared memory) and the CUDA C++ Programming Guide table
#: "Technical Specifications per Compute Capability" (compute capability 9.0).
H100_SMEM_BYTES = 227 * 1024
#: The same in float32 elements: 58112.
H100_M_FP32 = H100_SMEM_BYTES // 4

KINDS = ("softmax", "spherical")
ALGORITHMS = ("materialised", "streaming")


@dataclass(frozen=True)
class AttentionIO:
    """Predicted cost of one head.  ``Br``/``Bc``: query/key block rows of the forward,
    ``Br_bwd``/``Bc_bwd`` of the backward (0 where the algorithm does not tile)."""
    reads: int
    writes: int
    bytes: int
    Br: int
    Bc: int
    Br_bwd: int
    Bc_bwd: int
    matmul_flops: int
    other_flops: int
    transcendentals: int
    state_per_row: int
    rescales: int


def _positive(**sizes: int) -> None:
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in sizes.values()):
        got = ", ".join(f"{k}={v!r}" for k, v in sizes.items())
        raise ValueError(f"sizes must be positive integers, got {got}")


def tiles(N: int, d: int, M: int, outer: str = "kv") -> tuple[int, int]:
    """``(Br, Bc)``, query and key/value block rows, from FlashAttention's Algorithm 1 rule.

    The operand the outer loop holds on chip (``outer="kv"``: K/V as in FA-1 and FA-2's backward;
    ``outer="q"``: Q as in FA-2's forward) gets ``⌈M/4d⌉`` rows, the streamed one
    ``min(⌈M/4d⌉, d)``; both are capped at ``N``.  One row each of Q, K, V, O must fit: ``M ≥ 4d``.
    (The paper's ceiling can overfill M by less than a row per operand; we keep it.)
    """
    _positive(N=N, d=d, M=M)
    if M < 4 * d:
        raise ValueError(f"on-chip memory M={M} is smaller than 4*d={4 * d} elements: "
                         "one row each of Q, K, V and O must fit")
    if outer not in ("kv", "q"):
        raise ValueError(f"outer must be 'kv' or 'q', got {outer!r}")
    big = min(-(-M // (4 * d)), N)
    small = min(big, d)
    return (small, big) if outer == "kv" else (big, small)


def _check(kind: str, algorithm: str, element_bytes: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be 'softmax' or 'spherical', got {kind!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be 'materialised' or 'streaming', got {algorithm!r}")
    _positive(element_bytes=element_bytes)


# ---------------------------------------------------------------------------------------------
# The simulation: walk each algorithm's loops and add up what every step moves and computes.

class _Walk:
    def __init__(self) -> None:
        self.reads = self.writes = self.mm = self.ops = self.special = self.rescales = 0

    def load(self, *sizes: int) -> None:
        self.reads += sum(sizes)

    def store(self, *sizes: int) -> None:
        self.writes += sum(sizes)

    def matmul(self, m: int, n: int, k: int) -> None:
        self.mm += 2 * m * n * k

    def op(self, n: int, special: int = 0) -> None:
        self.ops += n
        self.special += special


def _blocks(N: int, B: int) -> Iterator[tuple[int, int]]:
    """(first row, rows) of each block of ``B`` rows; the last one may be short."""
    for start in range(0, N, B):
        yield start, min(B, N - start)


def _visible(q0: int, br: int, k0: int, causal: bool) -> bool:
    """False when the whole tile lies above the diagonal: its first key follows its last query."""
    return not causal or k0 <= q0 + br - 1


def _materialised(w: _Walk, kind: str, N: int, d: int, backward: bool) -> None:
    sph, NN, Nd = kind == "spherical", N * N, N * d
    w.load(Nd, Nd); w.matmul(N, N, d); w.store(NN)                  # S = Q Kᵀ
    w.load(NN)                                                      # row-wise kernel reads S
    for _ in range(N):
        if sph:   # scale, square, sum; +ε, sqrt, reciprocal per row; a = s·r
            w.op(4 * N + 3, special=1)
        else:     # scale, max, -max, exp, sum, divide
            w.op(6 * N, special=N)
    w.store(NN, *([N] if sph else []))                              # P or A (and r)
    w.load(NN, Nd); w.matmul(N, d, N); w.store(Nd)                  # O = P V
    if not backward:
        return
    w.load(NN, Nd); w.matmul(N, d, N); w.store(Nd)                  # dV = Pᵀ dO
    w.load(Nd, Nd); w.matmul(N, N, d); w.store(NN)                  # dP = dO Vᵀ
    w.load(NN, NN, *([N] if sph else []))                           # P, dP (and r)
    for _ in range(N):
        # softmax dS = P∘(dP - rowsum(P∘dP)): product, sum, subtract, product, scale
        # spherical ds = r(dA - a·rowsum(dA∘a)): product, sum, a·c, subtract, ·r, scale
        w.op((6 if sph else 5) * N)
    w.store(NN)                                                     # dS
    for _ in ("dQ = dS K", "dK = dSᵀ Q"):
        w.load(NN, Nd); w.matmul(N, d, N); w.store(Nd)


def _streaming(w: _Walk, kind: str, N: int, d: int, M: int, causal: bool, backward: bool) -> None:
    sph = kind == "spherical"
    Br, Bc = tiles(N, d, M, outer="q")                              # FA-2 Algorithm 1
    for q0, br in _blocks(N, Br):
        w.load(br * d)                                              # Q_i
        first = True
        for k0, bc in _blocks(N, Bc):
            if not _visible(q0, br, k0, causal):
                continue
            w.load(bc * d, bc * d)                                  # K_j, V_j
            w.matmul(br, bc, d); w.matmul(br, d, bc)                # S = Q_i K_jᵀ; acc += P V_j
            t = br * bc
            if sph:
                w.op(3 * t)                                         # scale, square, row sum
            else:
                w.op(5 * t, special=t)                              # scale, max, -m, exp, sum
                if not first:
                    w.op(3 * br, special=br)                        # α = exp(m - m'); l ← α l
                    w.op(br * d); w.rescales += br * d              # acc ← α acc
            first = False
        if sph:
            w.op(3 * br + br * d, special=br)                       # r = 1/√(q+ε); O = r acc
        else:
            w.op(2 * br + br * d, special=br)                       # O = acc/l; L = m + log l
        w.store(br * d, br)                                         # O_i, L_i | r_i
    if not backward:
        return
    Br, Bc = tiles(N, d, M, outer="kv")                             # FA-2 Algorithm 2
    for _, br in _blocks(N, Br):                                    # D = rowsum(dO∘O)
        w.load(br * d, br * d); w.op(2 * br * d); w.store(br)
    w.store(N * d)                                                  # dQ = 0 in HBM
    for k0, bc in _blocks(N, Bc):
        w.load(bc * d, bc * d)                                      # K_j, V_j
        for q0, br in _blocks(N, Br):
            if not _visible(q0, br, k0, causal):
                continue
            w.load(br * d, br * d, br * d, br, br)                  # Q_i, dO_i, dQ_i, L_i|r_i, D_i
            for _ in range(5):                                      # S, dV, dP, dQ, dK products
                w.matmul(br, bc, d)
            # softmax: scale, -L, exp, dP - D, P∘(..), scale | spherical: scale, ·r, a·D, -, ·r, scale
            w.op(6 * br * bc, special=0 if sph else br * bc)
            w.store(br * d)                                         # dQ_i (atomic add)
        w.store(bc * d, bc * d)                                     # dK_j, dV_j


def _result(w: _Walk, kind: str, algorithm: str, N: int, d: int, M: int, backward: bool,
            element_bytes: int) -> AttentionIO:
    streaming = algorithm == "streaming"
    fwd = tiles(N, d, M, outer="q") if streaming else (0, 0)
    bwd = tiles(N, d, M, outer="kv") if streaming and backward else (0, 0)
    return AttentionIO(w.reads, w.writes, (w.reads + w.writes) * element_bytes, *fwd, *bwd, w.mm,
                       w.ops, w.special, (1 if kind == "spherical" else 2) if streaming else 0,
                       w.rescales)


def attention_io(N: int, d: int, M: int, kind: str = "softmax", algorithm: str = "streaming",
                 causal: bool = False, backward: bool = False, element_bytes: int = 4) -> AttentionIO:
    """Predicted transfers and flops of one head, by walking the algorithm's loops tile by tile."""
    _check(kind, algorithm, element_bytes)
    tiles(N, d, M)                                                  # validates N, d, M
    w = _Walk()
    if algorithm == "materialised":
        _materialised(w, kind, N, d, backward)
    else:
        _streaming(w, kind, N, d, M, causal, backward)
    return _result(w, kind, algorithm, N, d, M, backward, element_bytes)


# ---------------------------------------------------------------------------------------------
# The closed forms, derived independently (by key block j, counting the query blocks that see it).

def _pairs(N: int, Br: int, Bc: int, causal: bool) -> tuple[int, int, int]:
    """``(A, C, S)``: over visited block pairs (i, j), the sums of ``br_i`` (query rows), of
    ``bc_j`` (key rows) and of ``br_i·bc_j`` (scores).  Without a mask ``(N·Tc, N·Tr, N²)``; with
    one, key block j is seen by query blocks ``i ≥ ⌊j·Bc/Br⌋``, i.e. by ``N - ⌊j·Bc/Br⌋·Br`` rows."""
    Tr, Tc = -(-N // Br), -(-N // Bc)
    if not causal:
        return N * Tc, N * Tr, N * N
    A = C = S = 0
    for j in range(Tc):
        i0, bc = j * Bc // Br, min(Bc, N - j * Bc)
        A, C, S = A + (N - i0 * Br), C + (Tr - i0) * bc, S + bc * (N - i0 * Br)
    return A, C, S


def closed_form(N: int, d: int, M: int, kind: str, algorithm: str, causal: bool = False,
                backward: bool = False, element_bytes: int = 4) -> AttentionIO:
    """The textbook counts as formulas (see the module docstring and docs/COST.md)."""
    _check(kind, algorithm, element_bytes)
    tiles(N, d, M)
    sph, NN, Nd, b = kind == "spherical", N * N, N * d, int(backward)
    if algorithm == "materialised":
        reads = 2 * NN + 3 * Nd + b * (5 * NN + 5 * Nd + sph * N)
        writes = 2 * NN + Nd + sph * N + b * (2 * NN + 3 * Nd)
        mm = 4 * NN * d + b * 8 * NN * d
        ops = (4 * NN + 3 * N if sph else 6 * NN) + b * (6 if sph else 5) * NN
        special = N if sph else NN
        rescales = 0
    else:
        A, C, S = _pairs(N, *tiles(N, d, M, outer="q"), causal)
        reads, writes, mm = Nd + 2 * d * C, Nd + N, 4 * d * S
        if sph:
            ops, special, rescales = 3 * S + Nd + 3 * N, N, 0
        else:   # first visited key block of each of the N rows needs no α, no rescale
            rescales = d * (A - N)
            ops, special = 5 * S + 3 * (A - N) + rescales + Nd + 2 * N, S + (A - N) + N
        if backward:
            A, _, S = _pairs(N, *tiles(N, d, M, outer="kv"), causal)
            reads += 2 * Nd + 2 * Nd + (3 * d + 2) * A              # O, dO for D; K, V; per pair
            writes += N + Nd + 2 * Nd + d * A                       # D; dQ = 0; dK, dV; dQ_i
            mm += 10 * d * S
            ops += 2 * Nd + 6 * S
            special += 0 if sph else S
    return AttentionIO(reads, writes, (reads + writes) * element_bytes,
                       *(tiles(N, d, M, outer="q") if algorithm == "streaming" else (0, 0)),
                       *(tiles(N, d, M, outer="kv") if algorithm == "streaming" and backward
                         else (0, 0)),
                       mm, ops, special, (1 if sph else 2) if algorithm == "streaming" else 0,
                       rescales)


def reference(N: int, d: int, M: int, algorithm: str) -> float:
    """FlashAttention's Theorem 2 orders (in elements): ``N²d²/M`` streaming, ``Nd + N²``
    materialised."""
    return N * N * d * d / M if algorithm == "streaming" else N * d + N * N


def plot(path: str, d: int = 64, M: int = H100_M_FP32, Ns: Sequence[int] | None = None,
         causal: bool = True, element_bytes: int = 4) -> str:
    """Log-log figure of predicted HBM bytes (forward+backward) against N for the four variants,
    with the Θ(Nd + N²) and Θ(N²d²/M) reference slopes; default M: an H100 thread block's 227 KiB
    of shared memory in float32 elements.  Returns ``path``."""
    from ..extras import require
    matplotlib = require("matplotlib", "napkin.plot", "matplotlib", "draw")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ns = list(Ns) if Ns is not None else [2 ** k for k in range(8, 17)]
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    styles: dict[tuple[str, str], dict[str, object]] = {
        (k, a): dict(color=f"C{2 * (a == 'streaming') + (k == 'spherical')}",
                     linestyle="-" if k == "softmax" else "--", marker="o" if k == "softmax" else "s",
                     markersize=7 if k == "softmax" else 4, fillstyle="full" if k == "softmax" else "none")
        for k in KINDS for a in ALGORITHMS}
    last: dict[str, float] = {}
    for (kind, alg), style in styles.items():
        ys = [attention_io(n, d, M, kind, alg, causal, True, element_bytes).bytes for n in Ns]
        ax.loglog(Ns, ys, label=f"{kind}, {alg}", **style)  # type: ignore[arg-type]
        last[alg] = ys[-1]
    ref: Callable[[int, str], float] = lambda n, alg: reference(n, d, M, alg)
    at = Ns[len(Ns) // 3]
    for alg, label, off, ha in (("materialised", "Θ(Nd + N²)", (-10, 8), "right"),
                                ("streaming", "Θ(N²d²/M)", (12, -14), "left")):
        scale = 1.6 * last[alg] / ref(Ns[-1], alg)
        ax.loglog(Ns, [scale * ref(n, alg) for n in Ns], ":", color="gray", linewidth=1)
        ax.annotate(label, (at, scale * ref(at, alg)), textcoords="offset points", xytext=off,
                    color="dimgray", ha=ha)
    ax.text(0.98, 0.03, "softmax and spherical move the same bytes (the curves overlap);\n"
            "spherical saves the running max, the rescaling and the exp",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="dimgray")
    mask = "causal" if causal else "no mask"
    ax.set(xlabel="sequence length N", ylabel="predicted HBM traffic, bytes (fwd + bwd)",
           title=f"Attention on a napkin: one head, d={d}, M={M} elements, {mask}")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
