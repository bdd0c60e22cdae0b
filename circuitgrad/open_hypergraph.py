"""Hypergraphs and open hypergraphs: the free symmetric monoidal category with Frobenius structure.

A :class:`Hypergraph` has ``W`` wires labelled ``w : W → Σ₀`` and ``X``
operations labelled ``x : X → Σ₁``; operation ``i`` reads the wires of
segment ``i`` of ``s`` and writes those of segment ``i`` of ``t``.  An
:class:`OpenHypergraph` adds its boundary, the wires ``s`` it takes and the
wires ``t`` it gives::

          s            H            t
    A ─────────▶ (wires, ops) ◀───────── B

``f >> g`` glues ``f``'s outputs to ``g``'s inputs (a coequalizer of wires),
``f @ g`` puts them side by side (a coproduct).  Vectorised throughout, after
Wilson & Zanasi, *Data-Parallel Algorithms for String Diagrams*, and the
``open-hypergraphs`` package (0.1.3), which the tests use as the reference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .finite_function import FiniteFunction, IndexedCoproduct

__all__ = ["Hypergraph", "OpenHypergraph"]

FF, IC = FiniteFunction, IndexedCoproduct


@dataclass
class Hypergraph:
    s: IndexedCoproduct   # Σ_{e ∈ X} arity(e) → W
    t: IndexedCoproduct   # Σ_{e ∈ X} coarity(e) → W
    w: FiniteFunction     # W → Σ₀
    x: FiniteFunction     # X → Σ₁

    def __post_init__(self):
        if self.s.target != self.W or self.t.target != self.W:
            raise ValueError(f"a hypergraph's source and target maps must land in its {self.W} wires, "
                             f"not {self.s.target} and {self.t.target}")
        if len(self.s) != self.X or len(self.t) != self.X:
            raise ValueError(f"a hypergraph with {self.X} operations has {len(self.s)} source and "
                             f"{len(self.t)} target segments")

    @property
    def W(self) -> int:
        """The number of wires."""
        return self.w.source

    @property
    def X(self) -> int:
        """The number of operations."""
        return len(self.x)

    @classmethod
    def empty(cls, w: FiniteFunction, x: FiniteFunction) -> "Hypergraph":
        e = IC.initial(0)
        return cls(e, e, w, x)

    @classmethod
    def discrete(cls, w: FiniteFunction, x: FiniteFunction) -> "Hypergraph":
        """Wires ``w`` and no operations (``x`` must be empty: it only carries the signature)."""
        if len(x):
            raise ValueError(f"Hypergraph.discrete(w, x) must be called with len(x) == 0, not {len(x)}")
        return cls(IC.initial(len(w)), IC.initial(len(w)), w, x)

    def coproduct(G, H: "Hypergraph") -> "Hypergraph":
        return type(G)(G.s @ H.s, G.t @ H.t, G.w + H.w, G.x + H.x)

    __add__ = coproduct

    @classmethod
    def coproduct_list(cls, Hs: Sequence["Hypergraph"]) -> "Hypergraph":
        if not Hs:
            raise ValueError("coproduct_list needs a nonempty list")
        return cls(IC.tensor_list([H.s for H in Hs]), IC.tensor_list([H.t for H in Hs]),
                   FF.coproduct_list([H.w for H in Hs]), FF.coproduct_list([H.x for H in Hs]))

    def coequalize_vertices(self, q: FiniteFunction) -> "Hypergraph":
        """The hypergraph with its wires identified by the quotient ``q : W → Q``."""
        if q.source != self.W:
            raise ValueError(f"a quotient of {q.source} wires for a hypergraph of {self.W}")
        return type(self)(self.s.map_values(q), self.t.map_values(q), q.coequalizer_universal(self.w), self.x)

    def permute(self, w: FiniteFunction, x: FiniteFunction) -> "Hypergraph":
        """The same hypergraph with wires renumbered by ``w`` and operations by ``x`` (both permutations)."""
        if w.type != (self.W, self.W) or x.type != (self.X, self.X):
            raise ValueError(f"permute needs permutations of {self.W} wires and {self.X} operations")
        xi = x.argsort()
        return type(self)(self.s.map_indexes(xi).map_values(w), self.t.map_indexes(xi).map_values(w),
                          w.argsort() >> self.w, xi >> self.x)


@dataclass
class OpenHypergraph:
    """A cospan ``A ─s▶ H ◀t─ B`` of hypergraphs with discrete feet."""

    s: FiniteFunction
    t: FiniteFunction
    H: Hypergraph

    def __post_init__(self):
        if self.s.target != self.H.W or self.t.target != self.H.W:
            raise ValueError(f"an open hypergraph's boundary must land in its {self.H.W} wires, "
                             f"not {self.s.target} and {self.t.target}")

    @property
    def source(self) -> FiniteFunction:
        """The labels of the source wires."""
        return self.s >> self.H.w

    @property
    def target(self) -> FiniteFunction:
        """The labels of the target wires."""
        return self.t >> self.H.w

    def signature(self) -> tuple[FiniteFunction, FiniteFunction]:
        return self.H.w.to_initial(), self.H.x.to_initial()

    # ---------------------------------------------------------------- category
    @classmethod
    def identity(cls, w: FiniteFunction, x: FiniteFunction) -> "OpenHypergraph":
        s = FF.identity(w.source)
        return cls(s, s, Hypergraph.discrete(w, x))

    def compose(f, g: "OpenHypergraph") -> "OpenHypergraph":
        if f.target != g.source:
            raise ValueError("cannot compose open hypergraphs: the target of the first is not the source of the second")
        q = f.t.inject0(g.H.W).coequalizer(g.s.inject1(f.H.W))
        return type(f)(f.s.inject0(g.H.W) >> q, g.t.inject1(f.H.W) >> q, (f.H + g.H).coequalize_vertices(q))

    def __rshift__(f, g: "OpenHypergraph") -> "OpenHypergraph":
        return f.compose(g)

    # -------------------------------------------------------- monoidal product
    @classmethod
    def unit(cls, w: FiniteFunction, x: FiniteFunction) -> "OpenHypergraph":
        """The empty diagram ``I → I`` over the signature of ``w`` and ``x`` (both empty)."""
        if len(w) or len(x):
            raise ValueError("the monoidal unit has no wires and no operations")
        e = FF.initial(0)
        return cls(e, e, Hypergraph.empty(w, x))

    def tensor(f, g: "OpenHypergraph") -> "OpenHypergraph":
        return type(f)(f.s @ g.s, f.t @ g.t, f.H + g.H)

    def __matmul__(f, g: "OpenHypergraph") -> "OpenHypergraph":
        return f.tensor(g)

    @classmethod
    def tensor_list(cls, ds: Sequence["OpenHypergraph"], w: FiniteFunction | None = None,
                    x: FiniteFunction | None = None) -> "OpenHypergraph":
        if not ds:
            return cls.unit(w, x)
        return cls(FF.tensor_list([d.s for d in ds]), FF.tensor_list([d.t for d in ds]),
                   Hypergraph.coproduct_list([d.H for d in ds]))

    @classmethod
    def twist(cls, a: FiniteFunction, b: FiniteFunction, x: FiniteFunction) -> "OpenHypergraph":
        """The symmetry ``a ⊗ b → b ⊗ a`` (its wires are labelled ``b + a``)."""
        if len(x):
            raise ValueError(f"twist(a, b, x) must have len(x) == 0, not {len(x)}")
        return cls(FF.twist(len(a), len(b)), FF.identity(len(a) + len(b)), Hypergraph.discrete(b + a, x))

    # --------------------------------------------------------------- Frobenius
    def dagger(self) -> "OpenHypergraph":
        return type(self)(self.t, self.s, self.H)

    @classmethod
    def spider(cls, s: FiniteFunction, t: FiniteFunction, w: FiniteFunction, x: FiniteFunction) -> "OpenHypergraph":
        return cls(s, t, Hypergraph.discrete(w, x))

    @classmethod
    def half_spider(cls, s: FiniteFunction, w: FiniteFunction, x: FiniteFunction) -> "OpenHypergraph":
        return cls.spider(s, FF.identity(len(w)), w, x)

    @classmethod
    def singleton(cls, x: FiniteFunction, a: FiniteFunction, b: FiniteFunction) -> "OpenHypergraph":
        """One operation ``x : a → b``."""
        if len(x) != 1:
            raise ValueError(f"len(x) must be 1, but was {len(x)}")
        if a.target != b.target:
            raise ValueError(f"a and b must have the same target, not {a.target} and {b.target}")
        H = Hypergraph(IC.singleton(FF.inj0(len(a), len(b))), IC.singleton(FF.inj1(len(a), len(b))), a + b, x)
        return cls(FF.inj0(len(a), len(b)), FF.inj1(len(a), len(b)), H)

    def permute(self, w: FiniteFunction, x: FiniteFunction) -> "OpenHypergraph":
        """The same morphism with its wires and operations renumbered."""
        return type(self)(self.s >> w, self.t >> w, self.H.permute(w, x))
