"""The visible graph of a program (:func:`circuit`): its instructions grouped by the definition that
created them (``Apply.path``) into nodes (boxes, primitives, sources, outputs), frames (expanded
definitions) and wires (tuples of arrays bundled), with the labels, tooltips and marks that
:mod:`.svg` draws.  Owns :class:`UnknownDefinition` (a bad ``expand`` name) and :data:`BUNDLE`.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..schedule import Program
from ..types import NdArrayType
from .fold import optimizer_sources
from .graph import Circuit, Frame, Node, Wire
from .grouping import acyclic, effective_paths, lca, phases, split_path
from .svg import box_broadcast, box_class, prim_broadcast, prim_class, static_lead, static_vars


class UnknownDefinition(ValueError):
    """An ``expand`` name that names no definition of the diagram; ``detail`` is the message without
    the ``draw: expand:`` prefix (the CLI reports it as ``--expand: ...``)."""

    def __init__(self, detail: str):
        super().__init__(f"draw: expand: {detail}")
        self.detail = detail


#: more arrays than this sharing both ends are drawn as one tuple wire (and one source or output)
BUNDLE = 3


def shape_label(T: NdArrayType, main: str = "") -> str:
    """``16×8×16`` (``scalar`` for ``[]``), with the dtype in front where it is not ``main``."""
    s = "×".join(str(d) for d in T.shape) or "scalar"
    return s if str(T.dtype) == main else f"{T.dtype} {s}"


class _Builder:
    """Groups the instructions of a program into visible nodes, frames and wires."""

    def __init__(self, prog: Program, title: str, in_names: list[str], in_kinds: list[str],
                 out_names: list[str], out_kinds: list[str], model_root: tuple[str, ...],
                 expand: Sequence[str], depth: int, param_names: dict | None = None, fold: bool = False):
        self.p = prog
        self.fold = fold
        self.param_names = param_names or {}
        self.title = title
        self.in_names, self.in_kinds = in_names, in_kinds
        self.out_names, self.out_kinds = out_names, out_kinds
        eff = effective_paths(prog)
        named = [e for e in eff if e]
        self.root = lca(named) if named else ()
        self.model_root = model_root if model_root and model_root != self.root else ()
        self.fullpath: dict[tuple[str, ...], str] = {}
        self.rel = [self._relative(e) for e in eff]
        self.expanded = self._expanded(expand, depth)
        self.static = static_vars(prog, [k == "parameter" for k in in_kinds])
        self.slead = static_lead(prog, self.static)
        self.prod, self.uses = prog.producers(), prog.uses()
        counts = Counter(str(t.dtype) for t in prog.types)
        self.dtype = min(counts, key=lambda d: (-counts[d], d)) if counts else "float32"

    def _relative(self, path: tuple[str, ...]) -> tuple[str, ...]:
        rel = path
        if rel[:len(self.root)] == self.root:
            rel = rel[len(self.root):]
        if self.model_root and rel[:len(self.model_root)] == self.model_root:
            rel = rel[len(self.model_root):]
        cut = len(path) - len(rel)
        for k in range(1, len(rel) + 1):
            self.fullpath.setdefault(rel[:k], "/".join(path[:cut + k]))
        return rel

    def full(self, key: tuple[str, ...]) -> str:
        """The full definition path of a relative key."""
        return self.fullpath.get(key, "/".join(key))

    def _expanded(self, expand: Sequence[str], depth: int) -> set[tuple[str, ...]]:
        names = set(expand)
        keys = {r[:k] for r in self.rel for k in range(1, len(r) + 1)}
        self._check_expand(expand, keys)
        want = {k for k in keys if len(k) < depth or "*" in names or k[-1] in names
                or "/".join(k) in names or self.full(k) in names}
        return {k[:n] for k in want for n in range(1, len(k) + 1)}

    def _check_expand(self, expand: Sequence[str], keys: set[tuple[str, ...]]) -> None:
        """Every name in ``expand`` must name a definition (by name or path), the root or ``"*"``."""
        known = {"*"} | {k[-1] for k in keys} | {"/".join(k) for k in keys} | {self.full(k) for k in keys}
        for outer in (self.root, self.root + self.model_root):    # the root is drawn open already
            known |= set(outer) | {"/".join(outer[:j]) for j in range(1, len(outer) + 1)}
        unknown = [str(n) for n in expand if n not in known]
        if unknown:
            defs = sorted({k[-1] for k in keys})
            deep = sorted(k for k in keys if len(k) > 1)
            example = f", by path such as {'/'.join(deep[0])!r}" if deep else ""
            raise UnknownDefinition(f"no definition named {', '.join(repr(n) for n in unknown)} in this "
                                    f"diagram; its definitions are {', '.join(defs) if defs else '(none)'} "
                                    f"(by name{example}, or '*' for all)")

    def _container(self, i: int) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...] | None]:
        """``(frames, box)``: the expanded definitions around instruction ``i``, and its collapsed
        definition (None: the instruction is drawn itself)."""
        r = self.rel[i]
        for k in range(1, len(r) + 1):
            if r[:k] not in self.expanded:
                return tuple(r[:j] for j in range(1, k)), r[:k]
        return tuple(r[:j] for j in range(1, len(r) + 1)), None

    # ------------------------------------------------------------------------------ grouping
    def group(self) -> list[tuple]:
        """The visible node key of every instruction (phases split definitions that are re-entered,
        such as a layer and its reverse map in a training step)."""
        p = self.p
        own = []
        member: list[list[tuple[str, ...]]] = []
        for i, a in enumerate(p.instrs):
            frames, box = self._container(i)
            alone = box is None or a.op.name == "Parameter"
            own.append(alone)
            member.append(list(frames) + ([] if alone else [box]))
        phase = phases(p, member, self.static)
        keys: list[tuple] = []
        for i, a in enumerate(p.instrs):
            chain = tuple((k, phase[i][k]) for k in member[i])
            keys.append(("one", i, chain) if own[i] else ("box", chain))
        return acyclic(p, keys)

    def build(self) -> Circuit:
        p, prod = self.p, self.p.producers()
        keys = self.group()
        frames: list[Frame] = []
        frame_of: dict[tuple, int] = {}
        reverse = False

        def frame(chain: tuple) -> int | None:
            nonlocal reverse
            if not chain:
                return None
            if chain not in frame_of:
                parent = frame(chain[:-1])
                (k, ph) = chain[-1]
                reverse |= ph > 0
                frames.append(Frame(_phase_label(k[-1], ph), f"{self.full(k)}{_phase_title(ph)}", parent))
                frame_of[chain] = len(frames) - 1
            return frame_of[chain]

        # nodes: sources first, then instruction nodes in program order, then outputs
        node_of_key: dict[tuple, int] = {}
        nodes: list[Node] = []
        members: list[list[int]] = []
        src_node: dict[int, int] = {}
        self.role: dict[int, str] = {}
        for n, v in enumerate(p.inputs):
            kind = self.in_kinds[n]
            param = kind == "parameter"
            nodes.append(Node("param" if param else "input", self.in_names[n],
                              f"{self.in_names[n]} : {p.types[v]} ({kind})", static=kind != "data",
                              order=-len(p.inputs) + n, sub=shape_label(p.types[v], self.dtype) if param else ""))
            self.role[len(nodes) - 1] = kind
            members.append([])
            src_node.setdefault(v, n)
        for i, a in enumerate(p.instrs):
            key = keys[i]
            if key not in node_of_key:
                node_of_key[key] = len(nodes)
                chain = key[2] if key[0] == "one" else key[1][:-1]
                nodes.append(Node("prim", "", "", frame=frame(chain), order=i,
                                  phase=max([ph for _, ph in key[1]] if key[0] == "box" else
                                            [ph for _, ph in key[2]], default=0)))
                members.append([])
            n = node_of_key[key]
            members[n].append(i)
            for r in a.results:
                src_node[r] = n
        for n, node in enumerate(nodes):
            if node.kind == "prim":
                if keys[members[n][0]][0] == "box":
                    chain = keys[members[n][0]][1]
                    reverse |= chain[-1][1] > 0
                    self._box(node, members[n], chain)
                else:
                    self._one(node, members[n][0])
        uses: dict[int, list[tuple[int, int | None]]] = {}
        for i, a in enumerate(p.instrs):
            n = node_of_key[keys[i]]
            for pos, x in enumerate(a.args):
                if src_node[x] != n:
                    slot = pos if nodes[n].fixed_slots else None
                    if slot is not None or (n, None) not in uses.get(x, []):
                        uses.setdefault(x, []).append((n, slot))
        self._bundle_sources(nodes, src_node, uses)
        self.alias: dict[int, int] = {}
        if self.fold:
            opt = {src_node[v] for v, k in zip(p.outputs, self.out_kinds)
                   if k in ("parameter", "state") and v in src_node}
            self.alias = optimizer_sources(nodes, src_node, uses, opt, len(p.types))
            for n in opt:
                nodes[n].optimizer = nodes[n].kind in ("box", "prim")
        out_node: list[int] = []
        for k, v in enumerate(p.outputs):
            out_node.append(self._output(nodes, k, v, src_node, out_node))
            uses.setdefault(v, []).append((out_node[-1], None))
        for node in nodes:
            node.wrap = self.fold and node.kind in ("box", "param", "const", "input", "output")
        wires = self._wires(nodes, src_node, uses, prod)
        keep = sorted({w.src for w in wires} | {d for w in wires for d, _ in w.dsts}
                      | {n for n, nd in enumerate(nodes) if nd.kind == "input"})
        return _compact(Circuit(self.title, nodes, wires, frames, self.dtype, reverse), keep)

    # ------------------------------------------------------------------------------ node kinds
    def _box(self, node: Node, instrs: list[int], chain: tuple) -> None:
        p = self.p
        key, ph = chain[-1]
        node.kind = "box"
        node.label = _phase_label(key[-1], ph)
        count = Counter(p.instrs[i].op.name for i in instrs)
        ops = ", ".join(f"{c} {n}" for n, c in sorted(count.items(), key=lambda t: (-t[1], t[0])))
        node.title = f"{self.full(key)}{_phase_title(ph)}: {len(instrs)} operations ({ops})"
        node.style, node.dashed, node.sub = box_class(p, instrs, self.static)
        node.bcast = box_broadcast(p, instrs, self.static, self.slead, self.uses)

    def _one(self, node: Node, i: int) -> None:
        p = self.p
        a = p.instrs[i]
        op = a.op
        where = f" at {a.path}" if a.path else " (plumbing)"
        node.order = i
        node.title = f"{op}{where}"
        node.fixed_slots = True
        node.n_in, node.n_out = len(a.args), len(a.results)
        if op.name == "Parameter":
            node.kind, node.label, node.static = "param", self.param_names.get(op, op.label), True
            node.sub = shape_label(op.T, self.dtype)
            node.title = f"Parameter {op.label} : {op.T} (init {op.init}){where}"
        elif op.name == "Constant":
            node.kind, node.label, node.static = "const", f"{op.value:g}", True
            node.sub = shape_label(op.T, self.dtype)
        elif op.name == "Copy":
            node.kind, node.label = "copy", ""
        else:
            node.kind, node.label = "prim", op.name
            node.style, node.dashed, node.sub = prim_class(p, i, self.static)
            node.bcast = prim_broadcast(p, i, self.static, self.slead, self.prod)
            node.static = all(self.static[x] for x in a.args)

    def _bundle_sources(self, nodes: list[Node], src_node: dict[int, int],
                        uses: dict[int, list[tuple[int, int | None]]]) -> None:
        """More than ``BUNDLE`` sources (inputs, parameters) of one kind with the same first consumer:
        one tuple source."""
        groups: dict[tuple, list[int]] = {}
        for v, n in sorted(src_node.items()):
            nd = nodes[n]
            if nd.kind in ("input", "param") and v in uses:
                dsts = sorted({d for d, _ in uses[v]})
                if all(not nodes[d].fixed_slots for d in dsts):
                    groups.setdefault((nd.kind, self.role.get(n, "parameter"), nd.frame, dsts[0]), []).append(v)
        for (k, role, fr, _), vs in groups.items():
            if len(vs) <= BUNDLE:
                continue
            what = {"parameter": "parameters", "state": "optimizer states", "data": "inputs"}.get(role, "arrays")
            names = [f"{nodes[src_node[v]].label} : {self.p.types[v]}" for v in vs]
            nodes.append(Node(k, f"{len(vs)} {what}", "\n".join(names), frame=fr, many=True,
                              order=min(nodes[src_node[v]].order for v in vs), static=role != "data"))
            for v in vs:
                nodes[src_node[v]].kind = "merged"
                src_node[v] = len(nodes) - 1

    def _output(self, nodes: list[Node], k: int, v: int, src_node: dict[int, int], prev: list[int]) -> int:
        """The output node of output ``k`` (tuples of many outputs of one kind from one node: one node)."""
        kind = self.out_kinds[k]
        src = src_node.get(v, -1)
        same = [j for j in range(len(self.p.outputs))
                if self.out_kinds[j] == kind and src_node.get(self.p.outputs[j], -1) == src]
        T = self.p.types[v]
        if len(same) <= BUNDLE:
            nodes.append(Node("output", self.out_names[k], f"{self.out_names[k]} : {T}", order=10 ** 9 + k))
            return len(nodes) - 1
        if same[0] != k:
            return prev[same[0]]
        what = {"parameter": "new parameters", "state": "new optimizer states"}.get(kind, "outputs")
        names = "\n".join(f"{self.out_names[j]} : {self.p.types[self.p.outputs[j]]}" for j in same)
        nodes.append(Node("output", f"{len(same)} {what}", names, order=10 ** 9 + k, many=True))
        return len(nodes) - 1

    def _wires(self, nodes: list[Node], src_node: dict[int, int],
               uses: dict[int, list[tuple[int, int | None]]], prod: dict[int, int]) -> list[Wire]:
        p = self.p
        groups: dict[tuple, list[int]] = {}
        for v in sorted(uses, key=lambda v: (prod.get(self.alias.get(v, v), -1), v)):
            dsts = tuple(d for d, _ in uses[v])
            groups.setdefault((src_node[v], dsts), []).append(v)
        wires: list[Wire] = []
        slots_out: dict[int, int] = {}
        slots_in: dict[int, int] = {}

        def slot(table: dict[int, int], n: int) -> int:
            table[n] = table.get(n, 0) + 1
            return table[n] - 1

        al = self.alias.get
        for (src, _), vs in groups.items():
            runs = [vs] if len(vs) > BUNDLE or nodes[src].many else [[v] for v in vs]
            for run in runs:
                v = run[0]
                if nodes[src].fixed_slots:
                    s = p.instrs[prod[v]].results.index(v)
                else:
                    s = slot(slots_out, src)
                dsts = [(d, sl if sl is not None else slot(slots_in, d)) for d, sl in uses[v]]
                if len(run) == 1:
                    label, title = shape_label(p.types[al(v, v)], self.dtype), f"v{al(v, v)} : {p.types[al(v, v)]}"
                else:
                    label = f"{len(run)} arrays"
                    title = "tuple: " + ", ".join(f"v{al(x, x)} : {p.types[al(x, x)]}" for x in run)
                wires.append(Wire(src, s, dsts, label, title, len(run)))
        for n, nd in enumerate(nodes):
            if not nd.fixed_slots:
                nd.n_in, nd.n_out = slots_in.get(n, 0), slots_out.get(n, 0)
        return wires


def _phase_label(name: str, phase: int) -> str:
    return name if phase == 0 else f"R[{name}]" if phase == 1 else f"R{phase}[{name}]"


def _phase_title(phase: int) -> str:
    return "" if phase == 0 else f" (pass {phase + 1}: its reverse map, in a derivative)"


def _compact(c: Circuit, keep: list[int]) -> Circuit:
    """Drop the nodes that lost all their wires (sources merged into a tuple source)."""
    new = {n: k for k, n in enumerate(keep)}
    c.nodes = [c.nodes[n] for n in keep]
    for w in c.wires:
        w.src = new[w.src]
        w.dsts = [(new[d], s) for d, s in w.dsts]
    return c


def circuit(prog: Program, title: str = "", in_names: list[str] | None = None,
            in_kinds: list[str] | None = None, out_names: list[str] | None = None,
            out_kinds: list[str] | None = None, model_root: str = "", expand: Sequence[str] = (),
            depth: int = 1, param_names: dict | None = None, fold: bool = False) -> Circuit:
    """The visible graph of ``prog`` (see :func:`~circuitgrad.drawing.draw` for ``expand`` and ``depth``); ``param_names``
    maps the :class:`~circuitgrad.primitives.Parameter` operations to the names drawn on their pills;
    ``fold``: drawn folded, so the optimizer gets its own parameter and constant sources
    (:func:`.fold.optimizer_sources`)."""
    ni, no = len(prog.inputs), len(prog.outputs)
    in_names = in_names or [f"v{v}" for v in prog.inputs]
    out_names = out_names or [f"v{v}" for v in prog.outputs]
    b = _Builder(prog, title or prog.name, in_names, in_kinds or ["data"] * ni, out_names,
                 out_kinds or ["data"] * no, split_path(model_root), expand, depth, param_names, fold)
    return b.build()
