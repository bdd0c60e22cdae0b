"""LUT4 and clock model coefficients per FPGA family, fitted by ``python bench/fpga_estimate.py --fit``.

Fitted by non-negative least squares. ``LUT4``: yosys synthesis (synth_ecp5 / synth_ice40) of the sequencer,
22 training designs at 1, 2 and 4 MAC lanes and with one read port; features as
:data:`circuitgrad.backends.fpga.cost.FEATURES`. ``UNROLLED_LUT4``: the unrolled predict,
22 MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_FEATURES`.
``PERIOD_NS``: the clock period (ns) nextpnr reaches on the same sequencer designs at 1 and 2 lanes, placed
and routed; features as :data:`circuitgrad.backends.fpga.cost.TIMING_FEATURES`. ``UNROLLED_PERIOD_NS``: the
same for the unrolled MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_TIMING_FEATURES`.
Generated: do not edit by hand.
"""
LUT4 = {
    "ecp5": {
        "const": 179.784,
        "rom": 0.659,
        "lanes": 0.0,
        "one_port": 182.871,
        "sequential": 222.499,
        "exp": 213.194,
        "sigmoid": 163.541,
        "tanh": 184.485,
        "compare": 0.0,
        "lutram": 346.924,
        "blocks": 29.14
    },
    "ice40": {
        "const": 334.397,
        "rom": 0.659,
        "lanes": 45.444,
        "one_port": 109.941,
        "sequential": 364.546,
        "exp": 296.964,
        "sigmoid": 199.924,
        "tanh": 246.923,
        "compare": 0.0,
        "blocks": 18.726
    }
}

UNROLLED_LUT4 = {
    "ecp5": {
        "add_bits": 0.211,
        "sub_bits": 0.935
    },
    "ice40": {
        "add_bits": 0.288,
        "sub_bits": 0.901
    }
}

PERIOD_NS = {
    "ecp5": {
        "const": 6.573,
        "banks": 0.085,
        "wide": 1.185,
        "tree": 1.565,
        "one_port": 0.511,
        "kluts": 0.339
    },
    "ice40": {
        "const": 16.367,
        "banks": 0.0,
        "wide": 5.036,
        "tree": 1.607,
        "one_port": 1.896,
        "kluts": 2.175
    }
}

UNROLLED_PERIOD_NS = {
    "ecp5": {
        "const": 1.553,
        "operands": 3.668,
        "kbits": 0.374
    },
    "ice40": {
        "const": 0.0,
        "operands": 12.497,
        "kbits": 0.654
    }
}
