"""How far apart two evaluations of one sum may land when they round differently.

Rounding model (IEEE 754, round to nearest): ``fl(a ∘ b) = (a ∘ b)(1 + δ)``, ``|δ| ≤ u = eps/2``. A sum of
``n`` terms, each a product rounded at most once (or fused into an FMA), accumulated in *any* order
(sequential, pairwise, blocked, SIMD lanes: whichever GEMM/GEMV kernel MKL or OpenBLAS picks on this CPU,
CIRCUITGRAD_BLAS=numpy or not) satisfies

    |fl(Σ tᵢ) − Σ tᵢ| ≤ γₙ · Σ|tᵢ|,    γₙ = n·u / (1 − n·u)

(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., (3.4)–(3.5)). Two such evaluations
of the same sum therefore differ by at most ``2·γₙ·Σ|tᵢ|`` ≈ ``n·eps·Σ|tᵢ|``: a bound in the *magnitude of
the terms*, not of the result, which may cancel to about 0 (where a relative tolerance alone fails).

For whole programs (a training step, a fused GPU kernel) :func:`error_bounds` carries such a bound through
every instruction (each primitive's sensitivity to its operands' errors plus its own rounding), and
:func:`assert_programs_close` / :func:`assert_within` compare two evaluations against twice that bound.

Use these helpers where two code paths compute the same sums in different orders; keep exact equality
where the semantics promise it (integers, fixed point, pure data movement, one correctly rounded
operation on both sides, or literally the same code path).
"""
from __future__ import annotations

import numpy as np


def gamma(n: int, dtype=np.float64) -> float:
    """γₙ = n·u / (1 − n·u): the relative error bound of ``n`` rounded operations in ``dtype``."""
    u = float(np.finfo(dtype).eps) / 2
    assert n * u < 0.5, f"gamma: {n} roundings in {np.dtype(dtype)} bound nothing"
    return n * u / (1 - n * u)


def assert_sums_close(got, want, n: int, magnitude, dtype=None, err_msg: str = "") -> None:
    """``got`` and ``want``: two evaluations (in ``dtype``, by default ``got``'s) of sums of at most ``n``
    rounded terms whose absolute values add up to ``magnitude`` (broadcast against them). Passes where they
    differ by at most ``2·γₙ·magnitude``, or are equal (infinities, matching NaNs)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shapes differ: {got.shape} vs {want.shape} {err_msg}"
    g = gamma(n, got.dtype if dtype is None else dtype)
    # magnitude is itself a sum of n non-negative terms, computed in float64: it may fall short by γₙ
    tol = 2 * g * (1 + gamma(n)) * np.broadcast_to(np.asarray(magnitude, dtype=np.float64), got.shape)
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = (np.abs(g64 - w64) <= tol) | (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
    if not ok.all():
        i = np.unravel_index(np.argmax(~ok), ok.shape)
        raise AssertionError(f"{(~ok).sum()} of {ok.size} elements differ by more than 2·γ_{n}·Σ|terms| "
                             f"(γ_{n} = {g:.3g}); first at {i}: {got[i]!r} vs {want[i]!r}, "
                             f"bound {tol[i]:.3g} {err_msg}")


def assert_matmul_close(got, want, a, b, dtype=None, err_msg: str = "") -> None:
    """``got`` and ``want``: two evaluations of ``a @ b`` (each element a dot product of length
    ``a.shape[-1]``, terms bounded by ``|a| @ |b|``), rounded in ``dtype`` (by default ``got``'s)."""
    a, b = np.asarray(a), np.asarray(b)
    magnitude = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert_sums_close(got, want, a.shape[-1], magnitude, dtype, err_msg)


# ------------------------------------------------------------------ whole programs: a running error bound
#: ulps a library function (exp, log, tanh; NumPy's SIMD versions included) may be off by, in units of u
LIBM = 8
_MOVES = ("Copy", "Transpose", "Reshape", "Broadcast", "Permute", "Slice", "Pad", "Unfold", "CausalMask")


def error_bounds(prog, inputs, input_errors=None) -> list[np.ndarray]:
    """For each output of ``prog`` at ``inputs`` (exact, or within ``input_errors`` of the exact values, as the
    outputs of an earlier bounded evaluation are): a bound ``E`` on how far any evaluation that
    rounds each primitive as IEEE arithmetic allows (sums in any order, FMAs or not, library functions within
    ``LIBM``·u) lands from the exact value. First order in u, propagated instruction by instruction along the
    reference values: ``E(a ∘ b)`` = the primitive's sensitivity to ``E(a)``, ``E(b)`` plus its own rounding
    (``u·|a + b|``, ``γₙ·(|A|@|B|)`` for a contraction of length n, …). Two such evaluations differ by ≤ 2E.
    Branches (ReLU's step, argmax) count as flipped (error 1) only where the input is within its error of
    the branch point."""
    val, err = {}, {}
    if input_errors is None:
        input_errors = [0.0] * len(inputs)
    for v, x, e in zip(prog.inputs, inputs, input_errors):
        val[v] = np.asarray(x)
        err[v] = np.broadcast_to(np.asarray(e, dtype=np.float64), np.shape(x))
    _propagate(prog.instrs, val, err)
    return [err[v] for v in prog.outputs]


def local_error_bounds(prog, instrs, values: dict, outputs) -> list[np.ndarray]:
    """:func:`error_bounds` of a run of ``instrs`` of ``prog`` (one GPU kernel's) reading ``values`` (every
    variable, as :func:`conftest.all_values` gives them): only these instructions round. A variable they do
    not compute (a kernel's input, a copy's output) is exact, up to its rounding into its declared type where
    the reference holds it finer (a float64 scalar of a float32 program)."""
    val, err = dict(values), {}
    for v, x in values.items():
        declared = np.dtype(prog.types[v].dtype.numpy_dtype())
        x = np.asarray(x)
        if declared.kind == "f" and x.dtype.kind == "f" and np.finfo(x.dtype).eps < np.finfo(declared).eps:
            err[v] = float(np.finfo(declared).eps) / 2 * np.abs(x.astype(np.float64))
    computed = {r for a in instrs for r in a.results}
    err = {v: e for v, e in err.items() if v not in computed}
    _propagate(instrs, val, err)
    return [err.get(v, np.zeros(np.shape(values[v]))) for v in outputs]


def kernel_instrs(prog, step) -> list:
    """The instructions one GPU kernel (``step``) evaluates, for :func:`local_error_bounds`: its work, with the
    program's views and copies of what it computes put back before they are read (a fused epilogue reads a
    sum's result through a view; the kernel indexes the sum directly, which a view does not round)."""
    made = {r for a in step.work for r in a.results}
    maker = {r: a for a in prog.instrs for r in a.results if a.op.kind in ("view", "copy")}
    out, have = [], set()

    def need(v):
        a = maker.get(v)
        if a is None or v in have or v in made:
            return
        for x in a.args:
            need(x)
        if all(x in made or x in have for x in a.args):
            out.append(a)
            have.update(a.results)

    for a in step.work:
        for x in a.args:
            need(x)
        out.append(a)
    return out


def _propagate(instrs, val: dict, err: dict) -> None:
    from circuitgrad import primitives as P
    from circuitgrad.interpret import FLOAT_RULES, causal_keep
    for ins in instrs:
        op, args = ins.op, [val[x] for x in ins.args]
        res = FLOAT_RULES[type(op)](op, *args)
        es = [err[x] if x in err else np.zeros(np.shape(val[x])) for x in ins.args]
        a64 = [np.asarray(x, dtype=np.float64) for x in args]
        r = np.asarray(res[0], dtype=np.float64)
        # the coarser of the value's dtype and the declared one (a kernel rounds in the type the program says)
        dts = [np.asarray(res[0]).dtype] + [np.dtype(t.dtype.numpy_dtype()) for t in getattr(op, "target", ())[:1]]
        u = max((float(np.finfo(d).eps) / 2 for d in dts if d.kind == "f"), default=0.0)
        g = (lambda n: n * u / (1 - n * u))
        name = type(op).__name__
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if name in _MOVES:
                out = [np.asarray(e, dtype=np.float64) for e in FLOAT_RULES[type(op)](op, es[0])]
            elif name in ("Constant", "OneHot", "Parameter"):
                out = [np.zeros(r.shape)]
            elif name == "Add":
                out = [es[0] + es[1] + u * np.abs(r)]
            elif name == "Neg":
                out = [es[0]]
            elif name == "Mul":
                (a, b), (ea, eb) = a64, es
                out = [np.abs(a) * eb + np.abs(b) * ea + ea * eb + u * np.abs(r)]
            elif name == "Scale":       # the product's rounding, and the constant's (1/n, lr) where it is not exact
                out = [abs(op.c) * es[0] + 2 * u * np.abs(r)]
            elif name in ("MatMul", "BatchMatMul"):
                (a, b), (ea, eb) = a64, es
                n = a.shape[-1]
                out = [ea @ np.abs(b) + np.abs(a) @ eb + ea @ eb + g(n) * (np.abs(a) @ np.abs(b))]
            elif name == "SumTo":
                n = a64[0].size // max(r.size, 1)
                s = lambda x: FLOAT_RULES[P.SumTo](op, x)[0]
                out = [np.asarray(s(es[0]) + g(n) * s(np.abs(a64[0])), dtype=np.float64)]
            elif name == "Fold":
                f = lambda x: np.asarray(FLOAT_RULES[P.Fold](op, x)[0], dtype=np.float64)
                out = [f(es[0]) + g(int(np.prod(op.kernel))) * f(np.abs(a64[0]))]
            elif name == "Heaviside":
                out = [np.where((np.abs(a64[0]) <= es[0]) & (es[0] > 0), 1.0, 0.0)]
            elif name == "ArgMaxMask":
                a, ea = a64[0], es[0]
                m = np.take_along_axis(a, a.argmax(-1)[..., None], -1)
                em = np.take_along_axis(ea, a.argmax(-1)[..., None], -1)
                near = (a >= m - ea - em) & (r == 0) & ((ea > 0) | (em > 0))
                out = [np.broadcast_to(near.any(-1, keepdims=True), r.shape).astype(np.float64)]
            elif name == "Sigmoid":     # σ' ≤ 1/4; tanh(x/2)/2 + 1/2 or 1/(1 + e^-x): absolute rounding ≤ (LIBM + 3)u
                out = [es[0] / 4 + (LIBM + 3) * u]
            elif name == "Tanh":        # tanh' = 1 − tanh² ≤ 1 − tanh(|a| − E)² on the interval
                a, ea = a64[0], es[0]
                out = [ea * (1 - np.tanh(np.maximum(np.abs(a) - ea, 0)) ** 2) + LIBM * u * np.abs(r)]
            elif name == "Exp":
                out = [np.abs(r) * np.expm1(es[0]) + LIBM * u * np.abs(r)]
            elif name == "Log":
                a, ea = a64[0], es[0]
                out = [np.where(a > ea, np.log(a) - np.log(a - ea), np.inf) + LIBM * u * np.abs(r)]
            elif name == "Sqrt":
                a, ea = a64[0], es[0]
                out = [np.sqrt(a) - np.sqrt(np.maximum(a - ea, 0)) + u * np.abs(r)]
            elif name == "Rsqrt":
                a, ea = a64[0], es[0]
                out = [np.where(a > ea, 1 / np.sqrt(a - ea) - 1 / np.sqrt(a), np.inf) + 3 * u * np.abs(r)]
            elif name == "Div":
                (a, b), (ea, eb) = a64, es
                out = [np.where(np.abs(b) > eb, (ea + np.abs(r) * eb) / (np.abs(b) - eb), np.inf) + u * np.abs(r)]
            elif name in ("Softmax", "LogSumExp"):
                # e_j = exp(x_j − m): relative error δ_j = u·|x_j − m| + LIBM·u; Σ e_j: γ_n; sensitivity of
                # s_i: s_i·(E_i + Σ_j s_j E_j); of log Σ e: Σ_j s_j E_j
                a, ea = a64[0], es[0]
                keep = causal_keep(a.shape) if getattr(op, "causal", False) else np.ones(a.shape[-2:], bool)
                keep = np.broadcast_to(keep, a.shape)
                am = np.where(keep, a, -np.inf)
                m = am.max(-1, keepdims=True)
                e = np.where(keep, np.exp(am - m), 0.0)
                s = e / e.sum(-1, keepdims=True)
                n = keep.sum(-1, keepdims=True)
                d = np.where(keep, u * np.abs(a - m) + LIBM * u, 0.0)
                spread = (s * ea).sum(-1, keepdims=True)
                mixed = (s * d).sum(-1, keepdims=True) + n * u / (1 - n * u)
                if name == "Softmax":
                    out = [np.where(keep, s * (ea + spread) + s * (d + mixed + u), 0.0)]
                else:
                    lg = np.log(e.sum(-1, keepdims=True))
                    out = [(spread + mixed + LIBM * u * np.abs(lg) + u * np.abs(m + lg))[..., 0]]
            else:
                raise NotImplementedError(f"error_bounds: no rule for {name}")
        for x, y, e in zip(ins.results, res, out):
            val[x], err[x] = np.asarray(y), np.asarray(e, dtype=np.float64)


def assert_programs_close(got, want, prog, inputs, input_errors=None, err_msg: str = "") -> list[np.ndarray]:
    """``got`` and ``want``: two evaluations of ``prog`` at ``inputs`` (lists of outputs); each output within
    2E of the other, E from :func:`error_bounds` (returned)."""
    assert len(prog.outputs) == len(list(want)), f"{len(prog.outputs)} outputs, {len(list(want))} given {err_msg}"
    bounds = error_bounds(prog, inputs, input_errors)
    assert_within(got, want, bounds, err_msg)
    return bounds


def assert_within(got, want, bounds, err_msg: str = "") -> None:
    """Lists of outputs: each element of ``got`` within ``2·bound`` of ``want`` (two evaluations, each within
    ``bound`` of the exact value), or equal; a bound must be finite (an infinite one would prove nothing)."""
    got, want = list(got), list(want)
    assert len(got) == len(want) == len(bounds), f"{len(got)} vs {len(want)} outputs {err_msg}"
    for k, (g, w, e) in enumerate(zip(got, want, bounds)):
        g64, w64 = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        assert g64.shape == w64.shape, f"output {k}: shapes {g64.shape} vs {w64.shape} {err_msg}"
        assert np.isfinite(e).all(), f"output {k}: the error bound is not finite here (it would prove nothing) {err_msg}"
        with np.errstate(invalid="ignore"):
            ok = (np.abs(g64 - w64) <= 2 * e) | (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
        if not ok.all():
            i = np.unravel_index(np.argmax(~ok), ok.shape)
            raise AssertionError(f"output {k}: {(~ok).sum()} of {ok.size} elements differ by more than twice "
                                 f"their error bound; first at {i}: {g64[i]!r} vs {w64[i]!r}, bound "
                                 f"{2 * e[i]:.3g} {err_msg}")
