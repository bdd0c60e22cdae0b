"""A generated kernel (:class:`Kernel`): its name, CUDA C source and how to call it, whatever its shape.

Every source ends with the elements each pointer argument must hold (``// circuitgrad extents: n…``,
:func:`with_extents`), which the host execution mode checks at each launch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .layout import gather_index, offset_bound

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["Kernel", "EXTENTS", "MAX_CHECKED", "with_extents"]


@dataclass
class Kernel:
    """A generated kernel: its name, full source, and how to call it."""
    name: str
    source: str
    inputs: list[int]          # plan variables read (pointer arguments, in order)
    outputs: list[int]         # plan variables written
    n: int                     # items: elements, or rows of a row kernel (see ``lanes``)
    ops: list[str]             # primitive names it executes (for reports)
    strided: frozenset = frozenset()   # inputs read through a layout (not element i for element i)
    in_types: tuple = ()               # C type of each input (``long long`` for ids), as in the source
    donated: dict = field(default_factory=dict)   # output -> the input it is written into (no ``__restrict__``)
    lanes: int = 1             # threads per item: 1 (a thread per element), or 32 (a warp per row)
    extents: tuple = ()        # elements each pointer argument must hold (inputs, then outputs): its whole type
    reads: tuple = ()          # (input position, stages): reads at the thread's own index i in [0, n)
    block: int | None = None   # threads per block (``None``: the glue's ``runtime.BLOCK``)

    @property
    def threads(self) -> int:
        """Threads the launch must cover: ``n`` items of ``lanes`` threads each."""
        return self.n * self.lanes


EXTENTS = "// circuitgrad extents:"
MAX_CHECKED = 1 << 22          # layout reads of kernels up to this many threads are checked when generated


def with_extents(k: Kernel, plan: Plan) -> Kernel:
    """``k`` with the elements each pointer argument must hold: the size of its variable's type (a kernel reads
    an input's base array anywhere in it, through its layout, and writes every element of its outputs). The source
    carries them in a comment (``// circuitgrad extents: n…``) that the host execution mode checks at each launch
    against the memory from each argument's pointer to the end of its allocation."""
    k.extents = tuple(plan.program.types[v].size for v in list(k.inputs) + list(k.outputs))
    for pos, stages in k.reads:                # the largest offset each layout read reaches stays in its input
        if k.n > MAX_CHECKED:
            continue
        top = offset_bound(k.n, stages) if k.n else -1
        if top is None or top >= k.extents[pos]:        # the bound does not settle it: gather the offsets
            top = int(gather_index(k.n, stages).max()) if k.n else -1
        if top >= k.extents[pos]:
            raise AssertionError(f"kernel {k.name}: input {pos} is read at offset {top}, past its "
                                 f"{k.extents[pos]} elements (a layout bug: out of bounds on a device)")
    k.source += f"{EXTENTS} {' '.join(map(str, k.extents))}\n"
    return k
