"""Functors applied to whole open hypergraphs at once: Frobenius functors and optics.

A :class:`FrobeniusFunctor` needs only two rules: the image of every wire
label (:meth:`~FrobeniusFunctor.map_objects`) and the tensor of the images
of many operations (:meth:`~FrobeniusFunctor.map_operations`).  Every
diagram is ``spider ; (id ⊗ x₁ ⊗ … ⊗ xₙ) ; spider``, so its image is three
diagrams composed, whatever its size::

        ┌─────────┐   ┌────────────────┐   ┌─────────┐
    FA ─┤ spider  ├───┤ id ⊗ F(x₁…xₙ)  ├───┤ spider  ├─ FB
        └─────────┘   └────────────────┘   └─────────┘

An :class:`Optic` maps each operation to a forward map ``A → B ⊗ M`` and a
reverse map ``M ⊗ B' → A'`` and wires them into one diagram: the reverse
derivative is one (:class:`circuitgrad.optic.ReverseDerivative`).  After
Wilson & Zanasi, *Data-Parallel Algorithms for String Diagrams*, §10, and
the ``open-hypergraphs`` package (0.1.3), the tests' reference.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from .finite_function import FiniteFunction, IndexedCoproduct
from .open_hypergraph import OpenHypergraph

__all__ = ["FrobeniusFunctor", "Optic", "partial_dagger"]

FF, IC, OH = FiniteFunction, IndexedCoproduct, OpenHypergraph


class FrobeniusFunctor(ABC):
    """A strict symmetric monoidal functor that preserves the Frobenius structure (spiders)."""

    @abstractmethod
    def map_objects(self, objects: FiniteFunction) -> IndexedCoproduct:
        """The image of each wire label: a list of labels per wire."""

    @abstractmethod
    def map_operations(self, x: FiniteFunction, sources: IndexedCoproduct, targets: IndexedCoproduct) -> OpenHypergraph:
        """``F(x₁) ⊗ … ⊗ F(xₙ)`` for the operations ``x`` whose wire types are ``sources → targets``."""

    def map_arrow(self, f: OpenHypergraph) -> OpenHypergraph:
        """The image of the whole diagram ``f``."""
        Fx = self.map_operations(f.H.x, f.H.s.map_values(f.H.w), f.H.t.map_values(f.H.w))
        Fw = self.map_objects(f.H.w)
        _, x = f.signature()
        i = OH.identity(Fw.values, x)
        sx = OH.spider(Fw.sources.injections(f.s), i.t + Fw.sources.injections(f.H.s.values), i.H.w, x)
        yt = OH.spider(i.s + Fw.sources.injections(f.H.t.values), Fw.sources.injections(f.t), i.H.w, x)
        return sx >> (i @ Fx) >> yt

    def __call__(self, f: OpenHypergraph) -> OpenHypergraph:
        return self.map_arrow(f)


class Optic(FrobeniusFunctor):
    """``x ↦ (F x, R x)`` with residuals ``M``: objects go to ``F(A) ⊗ R(A)``, interleaved per wire."""

    F: FrobeniusFunctor   # forward maps
    R: FrobeniusFunctor   # reverse maps

    @abstractmethod
    def residual(self, x: FiniteFunction, a: IndexedCoproduct, b: IndexedCoproduct) -> IndexedCoproduct:
        """The residual object ``M`` of each operation ``x[i] : a[i] → b[i]``."""

    def map_objects(self, A: FiniteFunction) -> IndexedCoproduct:
        FA, RA = self.F.map_objects(A), self.R.map_objects(A)
        if len(FA) != len(RA):
            raise ValueError(f"an optic's forward and reverse images have {len(FA)} and {len(RA)} blocks")
        values = (FA + RA).map_indexes(FF.transpose(2, len(FA))).values
        return IC(FF(None, FA.sources.table + RA.sources.table), values)

    def map_operations(self, x: FiniteFunction, A: IndexedCoproduct, B: IndexedCoproduct) -> OpenHypergraph:
        fwd = self.F.map_operations(x, A, B)       # FA → FB ⊗ M, per operation
        rev = self.R.map_operations(x, A, B)       # M ⊗ RB → RA, per operation
        FA, FB = self.F.map_objects(A.values), self.F.map_objects(B.values)
        RA, RB = self.R.map_objects(A.values), self.R.map_objects(B.values)
        M = self.residual(x, A, B)
        e = x.to_initial()
        fwd_interleave = self.interleave_blocks(B.flatmap(FB), M, e).dagger()
        rev_cointerleave = self.interleave_blocks(M, B.flatmap(RB), e)
        #       ┌────┐
        #       │    ├──────────────── FB
        # FA ───┤ Ff │  M
        #       │    ├───┐  ┌────┐
        #       └────┘   └──┤    │
        #                   │ Rf ├──── RA
        # RB ───────────────┤    │
        #                   └────┘
        lhs = (fwd >> fwd_interleave) @ OH.identity(RB.values, e)
        rhs = OH.identity(FB.values, e) @ (rev_cointerleave >> rev)
        d = partial_dagger(lhs >> rhs, FA, FB, RA, RB)
        return self.interleave_blocks(FA, RA, e).dagger() >> d >> self.interleave_blocks(FB, RB, e)

    @staticmethod
    def interleave_blocks(A: IndexedCoproduct, B: IndexedCoproduct, x: FiniteFunction) -> OpenHypergraph:
        """``A + B → (A₀ + B₀) + (A₁ + B₁) + …``, a spider."""
        if len(A) != len(B):
            raise ValueError(f"cannot interleave {len(A)} blocks with {len(B)}")
        if len(x):
            raise ValueError(f"x must be initial, but has {len(x)} operations")
        AB = A + B
        t = AB.sources.injections(FF.transpose(2, len(A)))
        return OH.spider(FF.identity(len(AB.values)), t, AB.values, x)

    def adapt(self, c: OpenHypergraph, A: FiniteFunction, B: FiniteFunction) -> OpenHypergraph:
        """The optic ``c`` of a map ``A → B`` as a map ``F(A) ⊗ R(B) → F(B) ⊗ R(A)``."""
        x = c.H.x.to_initial()
        FA, FB = self.F.map_objects(A), self.F.map_objects(B)
        RA, RB = self.R.map_objects(A), self.R.map_objects(B)
        d = self.interleave_blocks(FA, RA, x) >> c >> self.interleave_blocks(FB, RB, x).dagger()
        return partial_dagger(d, FA, FB, RB, RA)


def partial_dagger(c: OpenHypergraph, FA: IndexedCoproduct, FB: IndexedCoproduct, RA: IndexedCoproduct,
                   RB: IndexedCoproduct) -> OpenHypergraph:
    """Bend the ``RB`` inputs and ``RA`` outputs of ``c : FA ⊗ RB → FB ⊗ RA`` around: ``FA ⊗ RA → FB ⊗ RB``."""
    s = (FF.inj0(len(FA.values), len(RB.values)) >> c.s) + (FF.inj1(len(FB.values), len(RA.values)) >> c.t)
    t = (FF.inj0(len(FB.values), len(RA.values)) >> c.t) + (FF.inj1(len(FA.values), len(RB.values)) >> c.s)
    return type(c)(s, t, c.H)
