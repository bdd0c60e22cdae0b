"""The proof-system interface (``backends/zk/systems/interface.py``): every registered system implements it, the
registry (``backends/zk/systems/registry.py``) maps each name to its system, and a proof goes prove → save → load →
verify through it."""
from __future__ import annotations

import argparse
import inspect
import os

import numpy as np
import pytest
from conftest import snarkjs_or_skip, zk_step_circuit

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.cli import add_parser
from circuitgrad.backends.zk.runs import bundle, run
from circuitgrad.backends.zk.systems.interface import MEMBERS, ProofSystem
from circuitgrad.backends.zk.systems.registry import DEFAULT, FALLBACK, SYSTEMS, for_proof

NAMES = ("ligero", "groth16", "plonk")


def test_the_registry_maps_each_name_to_its_system_in_order():
    assert type(SYSTEMS) is dict and tuple(SYSTEMS) == NAMES and zk.SYSTEMS is SYSTEMS
    assert [s.name for s in SYSTEMS.values()] == list(NAMES) and all(s.name == n for n, s in SYSTEMS.items())
    assert "plonk" in SYSTEMS and "stark" not in SYSTEMS
    assert SYSTEMS.get("stark") is None and SYSTEMS.get("plonk").name == "plonk"
    with pytest.raises(KeyError):
        SYSTEMS["stark"]
    assert DEFAULT == "ligero" and FALLBACK is SYSTEMS["groth16"]


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_system_implements_every_member(name):
    s = SYSTEMS[name]
    assert isinstance(s, ProofSystem) and s.name == name
    assert not inspect.isabstract(type(s))
    missing = [m for m in MEMBERS if not hasattr(s, m)]
    assert not missing, f"{name} lacks {missing}"
    abstract = {m for m, v in vars(ProofSystem).items() if getattr(v, "__isabstractmethod__", False)}
    annotated = set(ProofSystem.__annotations__)
    assert abstract | annotated <= set(MEMBERS)            # MEMBERS names the whole interface
    assert isinstance(s.field, zk.Field) and isinstance(s.dtype, cg.Fixed) and isinstance(s.suffix, str)
    for flag in ("lookups", "challenges", "trusted_setup", "private_runs", "split_steps"):
        assert isinstance(getattr(s, flag), bool), flag
    assert isinstance(s.soundness_modes, tuple)
    assert (s.default_soundness is None) == (not s.soundness_modes)
    assert s.default_soundness is None or s.default_soundness in s.soundness_modes
    assert s.step_name(7) == f"step_007{s.suffix}" == bundle.step_name(7, name)


def test_each_system_states_its_field_dtype_and_abilities():
    lig, g16, plonk = (SYSTEMS[n] for n in NAMES)
    assert (lig.field, lig.dtype, lig.suffix) == (zk.LIGERO51, cg.fixed(16, 8), ".proof")
    assert lig.lookups and lig.challenges and lig.private_runs and lig.split_steps and not lig.trusted_setup
    assert lig.soundness_modes == tuple(zk.systems.ligero.SOUNDNESS) and lig.default_soundness == "longfellow"
    for s in (g16, plonk):
        assert (s.field, s.dtype, s.suffix) == (zk.BN254, cg.fixed(32, 16), "")
        assert s.trusted_setup and not (s.lookups or s.challenges or s.private_runs or s.split_steps or s.soundness_modes)
    assert run.SYSTEM is lig
    assert bundle.step_name(0, "ligero") == "step_000.proof" and bundle.step_name(12, "plonk") == "step_012"


def _choices_error(capsys, *args) -> str:
    ap = argparse.ArgumentParser(prog="circuitgrad")
    add_parser(ap.add_subparsers(dest="cmd", required=True))
    with pytest.raises(SystemExit):
        ap.parse_args(["zk", *args, "--system", "stark"])
    return capsys.readouterr().err


@pytest.mark.parametrize("args", [("prove", "m.py"), ("verify", "m.py", "proofs")])
def test_the_registry_names_are_the_cli_system_choices(capsys, args):
    err = _choices_error(capsys, *args)
    assert f"invalid choice: 'stark' (choose from {', '.join(repr(n) for n in SYSTEMS)})" in err


@pytest.fixture(scope="module")
def tiny():
    """A two-sample iris step: the smallest MLP step circuit, fixed(16, 8) over the Ligero field."""
    return zk_step_circuit("iris", 2, [2])


# prove -> save -> load -> verify on the tiny circuit: (system, prove options); snarkjs's below (slow)
ROUND_TRIPS = [("ligero", {"rng": np.random.default_rng(0)}),
               ("ligero", {"rng": np.random.default_rng(1), "soundness": "classic"})]


@pytest.mark.parametrize("name,options", ROUND_TRIPS)
def test_round_trip_through_the_interface(tiny, tmp_path, name, options):
    c, wit = tiny
    s = SYSTEMS[name]
    soundness = options.get("soundness")
    proof = s.prove(c, wit, **options)
    assert s.owns(proof) and for_proof(proof) is s
    path = str(tmp_path / s.step_name(0))
    s.save(proof, path)
    assert os.path.exists(path) and s.summary(proof, path)
    back = s.load(path, c, soundness)
    assert s.verify(back, c, wit.public, soundness) and zk.verify(back, c, wit.public, soundness)
    s.check(back, c, wit.public, soundness, **s.verifier_keys(c))
    assert proof.statement == s.statement(c, soundness) and s.soundness_of(proof.statement, c) == (soundness
                                                                                                  or "longfellow")
    bad = list(wit.public)
    bad[-1] = (bad[-1] + 1) % c.field.p
    assert not s.verify(back, c, bad, soundness)
    assert s.missing_setup(c) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["groth16", "plonk"])
def test_snarkjs_round_trip_through_the_interface(tmp_path, name):
    snarkjs_or_skip()
    step = cg.compile_model(nn.mlp(1, [2, 2, 2]), loss=nn.mse, optimizer=nn.sgd(0.25), dtype=cg.fixed(12, 6))
    c = zk.compile(step)
    rng = np.random.default_rng(0)
    wit = c.witness(step.init_params(seed=0), rng.normal(size=(1, 2)), rng.normal(size=(1, 2)) * 0.5)
    s = SYSTEMS[name]
    proof = s.prove(c, wit, log=lambda m: None)
    assert s.owns(proof) and for_proof(proof) is s
    path = str(tmp_path / s.step_name(0))
    s.save(proof, path)
    back = s.load(path, c)
    keys = s.verifier_keys(c)
    assert s.verify(back, c, wit.public, **keys) and zk.verify(back, c, wit.public, **keys)
    s.check(back, c, **keys)
    other = SYSTEMS[next(n for n in ("groth16", "plonk") if n != name)]
    with pytest.raises(zk.FormatError, match=rf"^step_000: a {name} proof, not {other.name}$"):
        other.load(path, c)


def test_a_snarkjs_proof_is_a_directory(tmp_path):
    path = tmp_path / "step_000"
    path.write_text("x")
    with pytest.raises(zk.FormatError, match=r"^step_000: a plonk proof is a directory \(proof\.json, "):
        SYSTEMS["plonk"].load(str(path))


def test_dispatch_and_its_messages_are_unchanged(tiny):
    c, wit = tiny
    proof = zk.prove(c, wit, rng=np.random.default_rng(0))
    assert for_proof(proof) is SYSTEMS["ligero"]
    assert for_proof(object()) is FALLBACK        # refused by name, as zk.verify always did
    assert not zk.verify(object(), c)
    with pytest.raises(zk.Reject, match=r"^not a snarkjs proof: object$"):
        zk.check(object(), c)
    with pytest.raises(TypeError, match=r"^zk\.verify: a Ligero proof needs no keys \(got \['vkey'\]\)$"):
        zk.verify(proof, c, vkey={})
    with pytest.raises(TypeError, match=r"^zk\.check: a Ligero proof needs no keys \(got \['zkey'\]\)$"):
        zk.check(proof, c, zkey="k")
    with pytest.raises(TypeError, match=r"^zk\.verify: soundness names an analysis of Ligero proofs; this is a "
                                        r"snarkjs proof$"):
        zk.verify(object(), c, soundness="classic")
    with pytest.raises(TypeError, match=r"^zk\.prove: soundness names an analysis of Ligero proofs, not of plonk$"):
        zk.prove(c, wit, system="plonk", soundness="classic")
    with pytest.raises(ValueError, match=r"^zk\.prove: unknown proof system \['x'\]; choose one of "):
        zk.prove(c, wit, system=["x"])
    with pytest.raises(TypeError, match=r"^zk\.verify: a proof is checked against the circuit"):
        zk.verify(proof)


def test_systems_without_lookups_refuse_a_lookup_circuit():
    c, wit = zk_step_circuit("iris", 2, [2], field=zk.LIGERO51)
    assert c.range_checks == "lookup"
    for s in SYSTEMS.values():
        if not s.lookups:
            with pytest.raises(ValueError, match="lookups"):
                s.prove(c, wit, log=lambda m: None)


def test_the_interface_modules_branch_on_no_system_name():
    root = os.path.dirname(zk.__file__)
    for module in ("systems/dispatch.py", "cli.py", "runs/run.py", "runs/bundle.py"):
        text = open(os.path.join(root, module)).read()
        for name in NAMES:
            for branch in (f'system == "{name}"', f'system != "{name}"', f"system == '{name}'"):
                assert branch not in text, (module, branch)
        assert "sj.SYSTEMS" not in text, module
