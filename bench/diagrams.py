"""Regenerate the neural circuit diagrams of docs/DIAGRAMS.md (``docs/diagrams/*.svg``).

    python bench/diagrams.py [--png DIR]

Draws the MLP, the digits CNN, a 2-layer GPT (collapsed), one transformer block (attention and
MLP expanded), the GPT's training step (forward, reverse passes and AdamW, collapsed, folded: the
lens picture) and single softmax / spherical attention heads (expanded) with
:func:`circuitgrad.drawing.draw`, and prints each one's size and how tall its smallest text prints
at a paper's full width (7 in: :func:`circuitgrad.drawing.svg.print_points`).  ``--png`` also
rasterises each with cairosvg into ``DIR``, to look at them.
"""
from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.drawing import draw  # noqa: E402
from circuitgrad.drawing.svg import print_points  # noqa: E402


def diagrams() -> dict[str, tuple[object, dict]]:
    """``{file stem: (what to draw, draw options)}``."""
    cnn = cg.sequential([nn.conv2d(8, 1, 8, 8, 16, kernel=3, padding=1), nn.relu(8, 16, 8, 8),
                         nn.max_pool2d(8, 16, 8, 8, 2), nn.flatten(8, 16, 4, 4), nn.dense(8, 256, 10)],
                        name="digits_cnn")
    step = cg.compile_model(nn.gpt(2, 8, 16, d=16, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(3e-3))
    return {
        "mlp": (nn.mlp(8, [4, 16, 3]), {}),
        "cnn": (cnn, {}),
        "gpt": (nn.gpt(2, 8, 16, d=16, heads=2, layers=2), {}),
        "gpt_block": (nn.transformer_block(2, 8, 16, heads=2),
                      {"expand": ("attention", "causal_softmax_attention", "mlp")}),
        "gpt_step": (step, {}),
        "attention_softmax": (nn.attention(2, 8, 16, heads=2, causal=True, kind="softmax"), {"expand": ("*",)}),
        "attention_spherical": (nn.attention(2, 8, 16, heads=2, causal=True, kind="spherical"),
                                {"expand": ("*",)}),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "diagrams"), help="where the SVGs go")
    ap.add_argument("--png", default=None, help="also write PNGs (cairosvg) into this folder")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    for stem, (f, kw) in diagrams().items():
        path = os.path.join(a.out, f"{stem}.svg")
        svg = draw(f, path, **kw)
        root = ET.fromstring(svg)
        print(f"{path}: {len(svg) // 1024} KiB, {root.get('width')} x {root.get('height')} px, "
              f"text {print_points(svg):.1f} pt at 7 in")
        if a.png:
            import cairosvg
            os.makedirs(a.png, exist_ok=True)
            cairosvg.svg2png(bytestring=svg.encode(), write_to=os.path.join(a.png, f"{stem}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
