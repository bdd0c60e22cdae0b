"""Gather kernels: a thread per result element, reading its input at computed offsets.

* ``Slice``, ``Pad``, ``Unfold`` and ``Fold`` (:func:`gather_kernel`) read a contiguous operand with the geometry
  baked in, zero outside it; ``Fold`` sums its overlapping blocks in a loop, so no atomics.
* ``copy`` kernels (:func:`copy_kernel`) gather a view into a contiguous array for a consumer that needs one (a
  batched cuBLAS product, a row kernel), through the view's layout.
"""
from __future__ import annotations

from circuitgrad import primitives as P

from .cuda import ctype, element_kernel, pointer, read_index, strided_offset
from .kernel import Kernel, with_extents
from .layout import contiguous_strides
from .plan import Launch, Plan

__all__ = ["GATHER_KERNELS", "gather_kernel", "copy_kernel"]

#: the primitives with a gather kernel (exactly those of kind ``"gather"``; ``tests/test_conformance.py`` checks)
GATHER_KERNELS = (P.Slice, P.Pad, P.Unfold, P.Fold)


def gather_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """One thread per result element of a Slice, Pad, Unfold or Fold (see :func:`_moves`)."""
    a = step.instrs[0]
    t = plan.program.types[a.results[0]]
    c = ctype(t)
    params = [pointer(c, "x", const=True), pointer(c, "y")]
    return with_extents(Kernel(name, element_kernel(name, params, _moves(a.op, c), t.size), list(step.inputs),
                               list(step.outputs), t.size, [a.op.name], frozenset(step.inputs), (c,)), plan)


def copy_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """``out[i] = base[offset(i)]``: a view made contiguous for a consumer that needs it."""
    (r,) = step.outputs
    t = plan.program.types[r]
    c = ctype(t)
    base, stages = step.layout
    idx, pre = read_index(stages, "j")
    params = [pointer(c, "in0", const=True), pointer(c, "out0")]
    return with_extents(Kernel(name, element_kernel(name, params, pre + [f"    out0[i] = in0[{idx}];"], t.size),
                               [base], [r], t.size, [f"copy({step.instrs[0].op.name})"], frozenset([base]), (c,),
                               reads=((0, tuple(stages)),)), plan)


def _coords(shape: tuple[int, ...], names: list[str]) -> list[str]:
    """Declarations of the coordinates of element ``i`` of a C-contiguous array of ``shape``."""
    cs = contiguous_strides(shape)
    return [f"    const long long {n} = (i / {st}LL) % {d}LL;" for n, st, d in zip(names, cs, shape)]


def _moves(op: P.Primitive, c: str) -> list[str]:
    """The body of a gather: ``y[i]`` from ``x`` (contiguous) for a Slice, Pad, Unfold or Fold."""
    if type(op) not in GATHER_KERNELS:
        raise NotImplementedError(f"GPU backend: no gather kernel for {op.name}")
    (xt,), (yt,) = op.source, op.target
    xs = contiguous_strides(xt.shape)
    if isinstance(op, P.Slice):
        off = sum(a * st for (a, _, _), st in zip(op.index, xs))
        strides = tuple(k * st for (_, _, k), st in zip(op.index, xs))
        return [f"    y[i] = x[{off}LL + {strided_offset('i', yt.shape, strides)}];"]
    if isinstance(op, P.Pad):
        d = len(yt.shape)
        lines = _coords(yt.shape, [f"t{k}" for k in range(d)])
        conds, terms = [], []
        for k, ((a, b, st), n) in enumerate(zip(op.index, xt.shape)):
            lines.append(f"    const long long r{k} = t{k} - {a}LL;")
            conds.append(f"r{k} >= 0 && r{k} % {st}LL == 0 && r{k} / {st}LL < {n}LL")
            terms.append(f"(r{k} / {st}LL) * {xs[k]}LL")
        return lines + [f"    y[i] = ({' && '.join(conds) or '1'}) ? x[{' + '.join(terms) or '0'}] : ({c})0;"]
    return _unfold(op, c) if isinstance(op, P.Unfold) else _fold(op, c)


def _unfold(op: P.Unfold, c: str) -> list[str]:
    """``y[b, (ch, ki, kj), (oy, ox)]``: the input pixel under kernel tap ``(ki, kj)`` of output ``(oy, ox)``."""
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.padding
    B, C, H, W = op.T.shape
    ho, wo = op.out_hw()
    return _coords((B, C, kh, kw, ho, wo), ["b", "ch", "ki", "kj", "oy", "ox"]) + [
        f"    const long long yy = oy * {sh}LL - {ph}LL + ki, xx = ox * {sw}LL - {pw}LL + kj;",
        f"    y[i] = (yy >= 0 && yy < {H}LL && xx >= 0 && xx < {W}LL) ? "
        f"x[((b * {C}LL + ch) * {H}LL + yy) * {W}LL + xx] : ({c})0;"]


def _fold(op: P.Fold, c: str) -> list[str]:
    """``y[b, ch, yy, xx]``: the sum of the blocks' entries that land on pixel ``(yy, xx)`` (Unfold's adjoint)."""
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.padding
    B, C, H, W = op.T.shape
    ho, wo = op.out_hw()
    K, L = C * kh * kw, ho * wo
    return _coords((B, C, H, W), ["b", "ch", "yy", "xx"]) + [
        f"    {c} acc = 0;",
        f"    for (long long ki = 0; ki < {kh}; ++ki) {{",
        f"        const long long ty = yy + {ph}LL - ki;",
        f"        if (ty < 0 || ty % {sh}LL != 0 || ty / {sh}LL >= {ho}LL) continue;",
        f"        for (long long kj = 0; kj < {kw}; ++kj) {{",
        f"            const long long tx = xx + {pw}LL - kj;",
        f"            if (tx < 0 || tx % {sw}LL != 0 || tx / {sw}LL >= {wo}LL) continue;",
        f"            acc += x[(b * {K}LL + (ch * {kh}LL + ki) * {kw}LL + kj) * {L}LL"
        f" + (ty / {sh}LL) * {wo}LL + tx / {sw}LL];",
        "        }",
        "    }",
        "    y[i] = acc;"]
