"""Kernels whose threads cooperate as a warp (the row kernels of :mod:`~.row`, the sums of :mod:`~.reduction`):
the shuffle butterfly, and its replay on the host.

A device combines the lanes' partials with ``__shfl_xor_sync``; the host cannot run 32 lanes at once, so each
such kernel also has a host-only ``<name>_body(item, …)`` (under ``#ifndef __CUDA_ARCH__``) that runs the lanes
one after another, in ``<name>_lane`` order (:func:`host_lane`), and replays every shuffle exactly with the same
combine function the device calls (:func:`combine`). The host execution mode calls it through
``<name>__host_warp`` (``#ifdef CG_HOSTRUN``, :func:`host_replay`); :mod:`~.host.check` through its loop over items.
"""
from __future__ import annotations

__all__ = ["WARP", "FULL", "lanes", "host_lane", "combine", "host_replay"]

WARP = 32
FULL = "0xffffffffu"            # the mask of a whole warp's lanes


def lanes(name: str, stmt: str, pad: str = "    ") -> str:
    """Host code: ``stmt`` for the warp's 32 lanes ``l``, one after another, in ``<name>_lane`` order."""
    return f"{pad}for (int l0 = 0; l0 < {WARP}; ++l0) {{ const int l = {name}_lane(l0); {stmt} }}\n"


def host_lane(name: str) -> str:
    """The host-only ``<name>_lane(l)``: a warp's lane ``l`` in the host mode's thread order (31 … 0 in reverse),
    so a kernel's host replay visits its lanes as the host execution mode orders threads."""
    return (f"inline int {name}_lane(int l) {{\n"
            "#ifdef CG_HOSTRUN\n"
            f"    return cg_reverse ? {WARP - 1} - l : l;\n"
            "#else\n"
            "    return l;\n"
            "#endif\n"
            "}\n")


def combine(name: str, tag: str, regs: list[tuple[str, str]], body: str) -> tuple[str, str, str]:
    """One warp reduction from ONE combine template: ``(helper, device loop, host replay)``.

    ``helper`` is the combine function, emitted once: ``<name>_comb_<tag>(T& r…, T r_o…)`` folds the partner's
    partial ``r_o`` into ``r`` (``body``). The device loop shuffles each register with lane ``lane ^ o`` (o = 16
    … 1) and calls it; the host replay calls the same function for every lane ``l`` with lane ``l ^ o``'s value
    (double-buffered, as the shuffle reads every lane's value before any lane combines), lanes in the order of
    ``<name>_lane`` (reversed in the host mode's ``reverse`` order). ``regs``: (register, C type)."""
    fn = f"{name}_comb_{tag}"
    sig = ", ".join([f"{t}& {r}" for r, t in regs] + [f"{t} {r}_o" for r, t in regs])
    helper = f"__host__ __device__ inline void {fn}({sig}) {{ {body} }}\n"
    shf = "".join(f"        const {t} {r}_o = __shfl_xor_sync({FULL}, {r}, o);\n" for r, t in regs)
    device = (f"    for (int o = {WARP // 2}; o > 0; o >>= 1) {{\n" + shf
              + f"        {fn}({', '.join(r for r, _ in regs)}, {', '.join(f'{r}_o' for r, _ in regs)});\n    }}\n")
    host = (f"    for (int o = {WARP // 2}; o > 0; o >>= 1) {{\n"
            + lanes(name, "".join(f"{r}2[l] = {r}[l]; " for r, _ in regs)
                    + f"{fn}({', '.join(f'{r}2[l]' for r, _ in regs)}, {', '.join(f'{r}[l ^ o]' for r, _ in regs)});",
                    "        ")
            + lanes(name, "".join(f"{r}[l] = {r}2[l]; " for r, _ in regs), "        ")
            + "    }\n")
    return helper, device, host


def host_replay(name: str, comment: str, item: str, sig: str, host: str, warp: str) -> str:
    """The host-only part of a warp kernel's source: ``<name>_lane``, ``<name>_body(long long <item>, <sig>)``
    (statements ``host``: the lanes in turn and the shuffles replayed) and, for the host execution mode,
    ``<name>__host_warp(block, warp, <sig>)`` (statements ``warp``). ``comment``: ``//`` lines saying how."""
    return ("#ifndef __CUDA_ARCH__\n" + comment + host_lane(name)
            + f"inline void {name}_body(long long {item}, {sig}) {{\n" + host + "}\n"
            "#ifdef CG_HOSTRUN\n"
            f"void {name}__host_warp(unsigned long long block, unsigned warp, {sig}) {{\n" + warp + "}\n"
            "#endif\n#endif\n")
