"""The FPGA micro-op kinds (``backends/fpga/kinds.py``) hold together: every kind a rule emits is a ``Kind`` with
every fact, and micro-ops obey their kind's operands and reductions; every unit the table names exists; the NumPy
model, the cycle model, the decoder's codes and the hardware's units cover exactly the enum's kinds (the codes
are the numbers the decoder's tables have always held); each kind runs on the simulated sequencer as the NumPy
model says, in the cycles the cycle model says; a made-up kind is refused, naming the kinds."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import typing

import numpy as np
import pytest
from conftest import VOCAB

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import fpga
from circuitgrad.backends.fpga import kinds as K
from circuitgrad.backends.fpga import microcode, rules, timing
from circuitgrad.backends.fpga.isa import MicroOp, Microcode, View, contiguous
from circuitgrad.backends.fpga.kinds import FACTS, KIND_CODES, Facts, Kind, Operand, Unit
from circuitgrad.tracing import apply
from circuitgrad.schedule import retype

Q = cg.fixed(16, 8)
#: the decoder's code of each kind: the numbers its tables have held since kinds were strings (sorted names)
CODES = {"add": 0, "argmax": 1, "copy": 2, "div": 3, "divf": 4, "eq": 5, "exp": 6, "heaviside": 7, "log": 8,
         "mac": 9, "max": 10, "neg": 11, "sigmoid": 12, "sqrt": 13, "tanh": 14}
REFUSED = ("unknown FPGA micro-op kind 'fft'; the kinds are add, argmax, copy, div, divf, eq, exp, heaviside, log, "
           "mac, max, neg, sigmoid, sqrt, tanh")


# ------------------------------------------------------------------ the table
def test_every_kind_has_every_fact():
    assert list(FACTS) == list(Kind)
    hints = typing.get_type_hints(Facts, vars(K))
    for k, f in FACTS.items():
        for field in dataclasses.fields(Facts):
            value = getattr(f, field.name)
            if field.name == "bits":
                assert value is None or callable(value), (k, field.name)
            else:
                assert isinstance(value, typing.get_origin(hints[field.name]) or hints[field.name]), (k, field.name)
        assert f.computes, k
        # the facts agree with one another: each unit has one timing, and its kinds' facts follow from it
        assert f.sequential == (f.unit is Unit.DIVIDER) and (f.bits(Q) > 0 if f.sequential else True), k
        assert f.latency == {Unit.EXP: K.EXP_STAGES, Unit.SIGMOID: K.SIGMOID_STAGES}.get(f.unit, 0), k
        assert f.reduces == (f.unit in (Unit.ACCUMULATOR, Unit.MAX)), k
        assert not f.index or f.reduces, k
        assert f.unrolled == (f.combinational or f.unit is Unit.ACCUMULATOR), k
        assert not (f.mask or f.fits) or f.combinational, k
        assert f.b is Operand.OPTIONAL if f.unit is Unit.ACCUMULATOR else f.b is not Operand.OPTIONAL, k


def test_the_decoders_codes_keep_their_numbers():
    assert KIND_CODES == CODES and {k: f.code for k, f in FACTS.items()} == CODES
    assert sorted(KIND_CODES.values()) == list(range(len(Kind)))


def test_a_kind_is_a_string_that_prints_as_its_name():
    u = MicroOp("mac", contiguous(0, (1,)), contiguous(1, (1,)))
    assert u.kind is Kind.MAC and u.kind == "mac" and KIND_CODES["mac"] == 9 and FACTS["max"].reduces
    assert (str(Kind.MAC), f"{Kind.MAC}", f"{Kind.MAC:>4}", repr(Kind.MAC)) == ("mac", "mac", " mac", "'mac'")
    assert repr(u).startswith("MicroOp(kind='mac', out=View(")


def test_a_made_up_kind_is_refused():
    with pytest.raises(ValueError) as e:
        Kind("fft")
    assert str(e.value) == REFUSED
    with pytest.raises(ValueError) as e:
        MicroOp("fft", contiguous(0, (1,)), contiguous(1, (1,)), source="FFT#9")
    assert str(e.value) == f"FFT#9: {REFUSED}"
    for ask in (K.facts, timing.latency, lambda k: microcode.elementwise_model(k, np.zeros(1), None, Q)):
        with pytest.raises(ValueError) as e:
            ask("fft")
        assert str(e.value) == REFUSED


# ------------------------------------------------------------------ what the rules emit
def _emitted_names() -> set[str]:
    """The kinds ``rules.py`` names where it emits: the first argument of every ``emit`` and ``_ew``."""
    tree = ast.parse(inspect.getsource(rules))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "emit"
                                           or getattr(node.func, "id", None) == "_ew"):
            arg = node.args[0]
            if isinstance(arg, ast.Name) and arg.id == "kind":           # _ew's own emit: its argument
                continue
            assert isinstance(arg, ast.Attribute) and ast.unparse(arg.value) == "Kind", ast.unparse(node)
            names.add(arg.attr)
    return names


def _programs():
    """Training steps and predicts of MLPs and a GPT, and every primitive of the vocabulary and its reverse."""
    for act in (nn.relu, nn.sigmoid, nn.tanh):
        step = cg.compile_model(nn.mlp(2, [3, 4, 2], activation=act), nn.softmax_cross_entropy, nn.sgd(0.1), dtype=Q)
        yield step.fn("step").program, Q, len(step.param_names)
    wide = cg.fixed(24, 10)
    gpt = cg.compile_model(nn.gpt(1, 3, 5, d=4, heads=1, layers=1), nn.softmax_cross_entropy, nn.sgd(0.1), dtype=wide)
    yield gpt.fn("step").program, wide, len(gpt.param_names)
    for op in VOCAB:
        d = cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)
        yield retype(cg.schedule(d), Q), Q, 0
        if op.name not in ("OneHot", "ArgMaxMask"):
            yield retype(cg.schedule(cg.rdiff(d)), Q), Q, 0


def test_every_kind_a_rule_emits_is_a_kind_and_its_micro_ops_obey_its_facts():
    names = _emitted_names()
    assert names <= set(Kind.__members__), names - set(Kind.__members__)
    seen = set()
    for prog, dt, write_back in _programs():
        for u in fpga.compile_program(prog, dt, write_back=write_back).ops:
            f = FACTS[u.kind]
            assert isinstance(u.kind, Kind) and f.code == KIND_CODES[u.kind], u
            assert (u.b is not None) == (f.b is Operand.REQUIRED) or f.b is Operand.OPTIONAL, u
            assert u.K == 1 or f.reduces, u
            assert not u.rescale or f.unit is Unit.ACCUMULATOR, u
            seen.add(u.kind)
    assert seen == set(Kind) == {Kind[n] for n in names}        # no kind is dead


# ------------------------------------------------------------------ who reads the table
def test_the_models_and_the_cycle_model_cover_exactly_the_kinds():
    ew, red = set(microcode.ELEMENTWISE_MODELS), set(microcode.REDUCTION_MODELS)
    assert ew | red == set(Kind) and not ew & red and red == {k for k, f in FACTS.items() if f.reduces}
    assert set(microcode.DOMAINS) == {k for k, f in FACTS.items() if f.refuses}
    assert timing.DRAIN_MAX == timing.DRAIN - 1 + timing.LANE_DRAIN + K.EXP_STAGES      # lanes and the exp unit
    for k in Kind:
        mc, _ = _one_op(k)
        assert timing.latency(k) == FACTS[k].latency and timing.op_cycles(mc).shape == (1,)


def test_every_unit_named_exists_in_the_hardware():
    pytest.importorskip("amaranth")
    from circuitgrad.backends.fpga import units
    assert set(K.UNITS) == set(Unit)
    for unit, uf in K.UNITS.items():
        module, name = uf.builder.split(".")
        assert callable(getattr(importlib.import_module(f"circuitgrad.backends.fpga.{module}"), name)), unit
    builders = {uf.builder for uf in K.UNITS.values()}
    assert {f"units.{n}" for n in ("elementwise", "exp_unit", "sigmoid_unit")} <= builders
    assert set(units.COMBINATIONAL) == {k for k, f in FACTS.items() if f.combinational}
    assert set(units.PIPELINED) == {k for k, f in FACTS.items() if f.latency}


def _one_op(kind: Kind, n: int = 4):
    """One micro-op of ``kind`` over ``n`` outputs (reducing over 3 where the kind reduces), operands in its
    domain: ``(microcode, inputs)``."""
    f, rng = FACTS[kind], np.random.default_rng(KIND_CODES[kind])
    k = 3 if f.reduces else 1
    A, B, out = contiguous(0, (n * k,)), contiguous(n * k, (n * k,)), contiguous(2 * n * k, (n,))
    a, b = (View(v.base, (n,), (k,), 1 if k > 1 else 0) for v in (A, B))
    u = MicroOp(kind, out, a, b if f.b is not Operand.NONE else None, k, f.unit is Unit.ACCUMULATOR, f"{kind}#0")
    xs = [rng.integers(1, 2 * Q.one, n * k), rng.integers(Q.one // 2, 2 * Q.one, n * k)]
    return Microcode(Q, [u], 2 * n * k + n, {}, [A, B], [out]), xs


@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_runs_on_the_sequencer_as_the_model_and_the_cycle_model_say(kind):
    pytest.importorskip("amaranth")
    from circuitgrad.backends.fpga.sim import simulate
    mc, xs = _one_op(kind)
    want = fpga.execute(mc, xs)[0][0]
    for ports in (2, 1):
        got, n = simulate(mc, xs, read_ports=ports)
        assert np.array_equal(got[0], want) and n == fpga.cycles(mc, ports), ports
