"""The attention IO model (circuitgrad/costmodel/napkin.py): simulation against closed forms, the Θ's of
FlashAttention's Theorem 2, what spherical attention saves, hand-computed tiny cases, errors, plot."""
from __future__ import annotations

import itertools
import re

import pytest

from circuitgrad.costmodel import napkin

VARIANTS = list(itertools.product(napkin.KINDS, napkin.ALGORITHMS, (False, True), (False, True)))
# N not a multiple of the tiles (7, 33, 101, 129), tiles of 1 (M = 4d), N smaller than a tile
# (N=5 with M=400), the inner block capped at d (M > 4d²) and not (M < 4d²).
GRID = [(4, 2, 16), (7, 2, 16), (5, 4, 400), (33, 4, 100), (64, 8, 32), (101, 8, 200),
        (129, 16, 2000), (96, 3, 50)]


@pytest.mark.parametrize("N,d,M", GRID)
@pytest.mark.parametrize("kind,algorithm,causal,backward", VARIANTS)
def test_simulation_equals_closed_form(N, d, M, kind, algorithm, causal, backward):
    walked = napkin.attention_io(N, d, M, kind, algorithm, causal=causal, backward=backward)
    assert walked == napkin.closed_form(N, d, M, kind, algorithm, causal=causal, backward=backward)
    assert walked.bytes == 4 * (walked.reads + walked.writes)
    half = napkin.attention_io(N, d, M, kind, algorithm, causal, backward, element_bytes=2)
    assert half.bytes == 2 * (half.reads + half.writes) and half.reads == walked.reads


def test_tiles_follow_flashattention():
    # Algorithm 1 of FlashAttention: Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d), both capped at N here.
    assert napkin.tiles(4096, 64, napkin.H100_M_FP32) == (64, 227)            # ⌈58112/256⌉ = 227
    assert napkin.tiles(4096, 64, napkin.H100_M_FP32, outer="q") == (227, 64)  # FA-2's forward
    assert napkin.tiles(4096, 64, 1000) == (4, 4)                            # ⌈1000/256⌉ = 4
    assert napkin.tiles(100, 8, 1000) == (8, 32)
    assert napkin.tiles(10, 8, 1000) == (8, 10)                              # capped at N
    assert napkin.tiles(3, 8, 1000, outer="q") == (3, 3)
    assert napkin.H100_M_FP32 == 58112
    io = napkin.attention_io(4096, 64, napkin.H100_M_FP32, "softmax", "streaming", backward=True)
    assert (io.Br, io.Bc, io.Br_bwd, io.Bc_bwd) == (227, 64, 64, 227)
    io = napkin.attention_io(4096, 64, napkin.H100_M_FP32, "softmax", "materialised", backward=True)
    assert (io.Br, io.Bc, io.Br_bwd, io.Bc_bwd) == (0, 0, 0, 0)


def test_hand_computed_tiny_case():
    # N=4, d=2, M=16: ⌈M/4d⌉ = 2, so Br = Bc = 2 in both passes, Tr = Tc = 2, 4 block pairs.
    # Streaming softmax forward, no mask:
    #   reads  = Q once (4·2 = 8) + K_j, V_j per pair (2·2·2 = 8, ×4 = 32)             = 40
    #   writes = O (8) + L (4)                                                          = 12
    #   matmul = 4 pairs × (S: 2·2·2·2 + P V: 2·2·2·2 = 32)                            = 128
    #   other  = 4 pairs × 5·(2·2) scores = 80; the 2nd key block of each of the 2 query blocks:
    #            α, l: 3·2 rows + acc rescale 2·2 = 10, ×2 = 20; end: O/l 8 + log, add 2·4 = 8 → 116
    #   rescales = 2 × 2·2 = 8; exps/logs = 16 + 4 (α) + 4 (log) = 24
    io = napkin.attention_io(4, 2, 16, "softmax", "streaming")
    assert (io.reads, io.writes, io.bytes, io.matmul_flops) == (40, 12, 208, 128)
    assert (io.other_flops, io.rescales, io.transcendentals, io.state_per_row) == (116, 8, 24, 2)
    # Causal: the pair (query block 0, key block 1) lies above the diagonal: 3 pairs.
    #   reads = 8 + 3·8 = 32; writes 12; matmul 3·32 = 96; other = 3·20 + 10 (query block 1 only) + 16
    io = napkin.attention_io(4, 2, 16, "softmax", "streaming", causal=True)
    assert (io.reads, io.writes, io.matmul_flops, io.other_flops, io.rescales) == (32, 12, 96, 86, 4)
    # Spherical, causal: same transfers; other = 3 pairs × 3·4 + O·r 8 + (+ε, sqrt, 1/x) 3·4 = 56
    io = napkin.attention_io(4, 2, 16, "spherical", "streaming", causal=True)
    assert (io.reads, io.writes, io.other_flops, io.rescales, io.transcendentals) == (32, 12, 56, 0, 4)
    # Streaming softmax backward, no mask: D pass reads O, dO (16), writes D (4); dQ = 0 writes 8;
    # K_j, V_j read once (16), dK_j, dV_j written once (16); per pair Q_i, dO_i, dQ_i (3·4) + L_i,
    # D_i (2·2) = 16 read, ×4 = 64, dQ_i (4) written, ×4 = 16.  Backward: 96 read, 44 written.
    io = napkin.attention_io(4, 2, 16, "softmax", "streaming", backward=True)
    assert (io.reads, io.writes) == (40 + 96, 12 + 44)
    assert io.matmul_flops == 128 + 4 * 5 * 16                                # 5 products per pair
    # Materialised softmax forward: S = QKᵀ reads 16, writes 16; softmax reads 16, writes 16;
    # O = P V reads 16 + 8, writes 8.
    io = napkin.attention_io(4, 2, 16, "softmax", "materialised")
    assert (io.reads, io.writes, io.other_flops, io.transcendentals) == (56, 40, 6 * 16, 16)


def test_causal_equal_blocks_closed_form():
    # With Br = Bc = B and B | N the visited tiles are the T(T+1)/2 on or below the diagonal, so the
    # scores computed are N(N+B)/2 and the forward reads Q once and K, V for each visited tile.
    N, d, M = 96, 8, 256                                       # ⌈256/32⌉ = 8 = d: B = 8, T = 12
    assert napkin.tiles(N, d, M, outer="q") == (8, 8)
    io = napkin.attention_io(N, d, M, "spherical", "streaming", causal=True)
    assert io.matmul_flops == 4 * d * N * (N + 8) // 2
    assert io.reads == N * d + 2 * 8 * d * (12 * 13 // 2)


@pytest.mark.parametrize("causal", [False, True])
def test_theta_in_n(causal):
    d, M = 64, napkin.H100_M_FP32
    for kind, algorithm in itertools.product(napkin.KINDS, napkin.ALGORITHMS):
        ratios = []
        for N in [512, 1024, 2048, 4096, 8192, 16384]:
            io = napkin.attention_io(N, d, M, kind, algorithm, causal=causal, backward=True)
            ratios.append((io.reads + io.writes) / napkin.reference(N, d, M, algorithm))
        lo, hi = ((10, 12) if algorithm == "materialised" else (4 if causal else 8, 64))
        assert all(lo <= r <= hi for r in ratios), (kind, algorithm, ratios)
        assert ratios == sorted(ratios, reverse=True)          # the lower-order terms fade...
        assert ratios[-2] / ratios[-1] < 1.1                   # ...to a constant


def test_theta_in_m():
    # Theorem 2's 1/M: at fixed N, d the streaming traffic over N²d²/M stays bounded across M.
    N, d = 1024, 16
    for causal, backward in itertools.product((False, True), (False, True)):
        ratios = []
        for M in [128, 512, 2048, 8192]:
            io = napkin.attention_io(N, d, M, "softmax", "streaming", causal, backward)
            ratios.append((io.reads + io.writes) / napkin.reference(N, d, M, "streaming"))
        # bounded (the Nd terms, reading Q and writing O, show only as M nears Nd)
        assert 4 <= min(ratios) and max(ratios) / min(ratios) < 1.5, ratios


@pytest.mark.parametrize("kind", napkin.KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_streaming_beats_materialised(kind, causal):
    d, M = 64, napkin.H100_M_FP32
    for N in [1024, 4096, 16384]:
        s = napkin.attention_io(N, d, M, kind, "streaming", causal, backward=True)
        m = napkin.attention_io(N, d, M, kind, "materialised", causal, backward=True)
        assert s.bytes < 0.25 * m.bytes
    # Non-causal streaming recomputes S in the backward: 14N²d matmul flops against 12N²d.
    N = 1024
    assert napkin.attention_io(N, d, M, kind, "streaming", backward=True).matmul_flops == 14 * N * N * d
    assert napkin.attention_io(N, d, M, kind, "materialised", causal, True).matmul_flops == 12 * N * N * d


def test_causal_skips_about_half_the_tiles():
    N, d, M = 8192, 64, napkin.H100_M_FP32
    for kind in napkin.KINDS:
        full = napkin.attention_io(N, d, M, kind, "streaming", False, True)
        masked = napkin.attention_io(N, d, M, kind, "streaming", True, True)
        assert 0.5 < masked.matmul_flops / full.matmul_flops < 0.52
        assert 0.5 < masked.bytes / full.bytes < 0.55
        # the materialised kernels build the mask from indices: nothing changes
        assert (napkin.attention_io(N, d, M, kind, "materialised", True, True)
                == napkin.attention_io(N, d, M, kind, "materialised", False, True))


@pytest.mark.parametrize("N,d,M", GRID + [(4096, 64, napkin.H100_M_FP32)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backward", [False, True])
def test_spherical_saves_state_rescales_and_flops(N, d, M, causal, backward):
    soft = napkin.attention_io(N, d, M, "softmax", "streaming", causal, backward)
    sph = napkin.attention_io(N, d, M, "spherical", "streaming", causal, backward)
    assert (sph.state_per_row, soft.state_per_row) == (1, 2)
    assert sph.rescales == 0
    assert sph.other_flops < soft.other_flops
    assert sph.transcendentals == N < soft.transcendentals     # one sqrt per row, no exp
    # the same transfers (L and r are both one float per row) and the same products
    assert (sph.reads, sph.writes, sph.matmul_flops) == (soft.reads, soft.writes, soft.matmul_flops)
    Tc = -(-N // soft.Bc)
    if not causal and Tc > 1:
        assert soft.rescales == N * d * (Tc - 1)


def test_errors():
    with pytest.raises(ValueError, match=re.escape(
            "on-chip memory M=15 is smaller than 4*d=16 elements: one row each of Q, K, V and O must fit")):
        napkin.tiles(8, 4, 15)
    with pytest.raises(ValueError, match=re.escape(
            "on-chip memory M=255 is smaller than 4*d=256 elements: one row each of Q, K, V and O must fit")):
        napkin.attention_io(1024, 64, 255, "spherical", "streaming")
    with pytest.raises(ValueError, match=re.escape("sizes must be positive integers, got N=0, d=2, M=16")):
        napkin.tiles(0, 2, 16)
    with pytest.raises(ValueError, match=re.escape("sizes must be positive integers, got N=8, d=-1, M=16")):
        napkin.closed_form(8, -1, 16, "softmax", "materialised")
    with pytest.raises(ValueError, match=re.escape("sizes must be positive integers, got N=8.0, d=2, M=16")):
        napkin.attention_io(8.0, 2, 16)
    with pytest.raises(ValueError, match=re.escape("sizes must be positive integers, got element_bytes=0")):
        napkin.attention_io(8, 2, 16, element_bytes=0)
    with pytest.raises(ValueError, match=re.escape("kind must be 'softmax' or 'spherical', got 'linear'")):
        napkin.attention_io(8, 2, 16, kind="linear")
    with pytest.raises(ValueError, match=re.escape(
            "algorithm must be 'materialised' or 'streaming', got 'flash'")):
        napkin.closed_form(8, 2, 16, "softmax", "flash")
    with pytest.raises(ValueError, match=re.escape("outer must be 'kv' or 'q', got 'k'")):
        napkin.tiles(8, 2, 16, outer="k")


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "napkin.png"
    assert napkin.plot(str(path), d=16, M=256, Ns=[64, 128, 256]) == str(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError) as e:
        napkin.plot(str(tmp_path / "n.png"))
    assert str(e.value) == "napkin.plot needs matplotlib: pip install 'circuitgrad[draw]'"
