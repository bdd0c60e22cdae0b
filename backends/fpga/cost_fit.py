"""LUT4 model coefficients per FPGA family, fitted by ``python bench/fpga_estimate.py --fit``.

Fitted to yosys synthesis (synth_ecp5 / synth_ice40) by non-negative least squares.
``LUT4``: the sequencer, 17 training designs at 1, 2 and 4 MAC lanes and with one read port;
features as :data:`circuitgrad.backends.fpga.cost.FEATURES`. ``UNROLLED_LUT4``: the unrolled predict,
10 MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_FEATURES`.
Generated: do not edit by hand.
"""
LUT4 = {
    "ecp5": {
        "const": 281.775,
        "rom": 0.557,
        "lanes": 61.072,
        "one_port": 90.185,
        "sequential": 258.576,
        "exp": 190.085,
        "sigmoid": 48.125,
        "tanh": 62.38,
        "compare": 0.0,
        "lutram": 309.029,
        "blocks": 6.582
    },
    "ice40": {
        "const": 405.631,
        "rom": 0.392,
        "lanes": 49.675,
        "one_port": 82.355,
        "sequential": 440.551,
        "exp": 233.498,
        "sigmoid": 135.837,
        "tanh": 157.389,
        "compare": 0.0,
        "blocks": 15.134
    }
}

UNROLLED_LUT4 = {
    "ecp5": {
        "add_bits": 0.14,
        "sub_bits": 1.256
    },
    "ice40": {
        "add_bits": 0.263,
        "sub_bits": 0.933
    }
}

PERIOD_NS = {
    "ecp5": {"const": 7.6},
    "ice40": {"const": 20.0}
}

UNROLLED_PERIOD_NS = {
    "ecp5": {"const": 5.0},
    "ice40": {"const": 12.0}
}
