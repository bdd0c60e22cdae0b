"""``circuitgrad/drawing/grouping.py``: which definition each instruction of a program is drawn in."""
from __future__ import annotations

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.drawing.grouping import effective_paths, lca, split_path


def test_paths_and_their_common_prefix():
    assert split_path("") == () and split_path("mlp/dense0/linear") == ("mlp", "dense0", "linear")
    assert lca([("mlp", "dense0", "linear"), ("mlp", "dense0", "bias")]) == ("mlp", "dense0")
    assert lca([("mlp", "dense0"), ("softmax_cross_entropy",)]) == ()
    assert lca([("gpt", "block0")]) == ("gpt", "block0")


def test_every_instruction_gets_a_definition_plumbing_included():
    """In a training step the gradient sums and copies carry no path of their own (``""``); each is drawn in the
    innermost definition around its neighbours, so no instruction is left out of every box."""
    step = cg.compile_model(nn.mlp(4, [3, 5, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    prog = cg.schedule(step.diagrams["step"])
    own = [split_path(a.path) for a in prog.instrs]
    eff = effective_paths(prog)
    assert len(eff) == len(prog.instrs)
    assert any(not p for p in own)                                   # the step has plumbing ...
    assert all(e == o for e, o in zip(eff, own) if o)                # ... defined instructions keep their paths
    placed = [e for e, o in zip(eff, own) if not o]
    assert placed and all(isinstance(e, tuple) for e in placed)
    known = {p[:k] for p in own if p for k in range(len(p) + 1)}
    assert all(e in known for e in placed)                           # plumbing joins a definition that exists
