"""LUT4 and clock model coefficients per FPGA family, fitted by ``python bench/fpga_estimate.py --fit``.

Fitted by non-negative least squares. ``LUT4``: yosys synthesis (synth_ecp5 / synth_ice40) of the sequencer,
17 training designs at 1, 2 and 4 MAC lanes and with one read port; features as
:data:`circuitgrad.backends.fpga.cost.FEATURES`. ``UNROLLED_LUT4``: the unrolled predict,
10 MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_FEATURES`.
``PERIOD_NS``: the clock period (ns) nextpnr reaches on the same sequencer designs at 1 and 2 lanes, placed
and routed; features as :data:`circuitgrad.backends.fpga.cost.TIMING_FEATURES`. ``UNROLLED_PERIOD_NS``: the
same for the unrolled MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_TIMING_FEATURES`.
Generated: do not edit by hand.
"""
LUT4 = {
    "ecp5": {
        "const": 318.82,
        "rom": 0.603,
        "lanes": 21.901,
        "one_port": 65.589,
        "sequential": 170.213,
        "exp": 289.514,
        "sigmoid": 82.423,
        "tanh": 123.077,
        "compare": 0.0,
        "lutram": 215.988,
        "blocks": 13.545
    },
    "ice40": {
        "const": 337.741,
        "rom": 0.642,
        "lanes": 38.192,
        "one_port": 99.528,
        "sequential": 369.871,
        "exp": 0.0,
        "sigmoid": 200.677,
        "tanh": 251.985,
        "compare": 292.256,
        "blocks": 20.06
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
    "ecp5": {
        "const": 7.225,
        "banks": 0.104,
        "lanes": 0.086,
        "kluts": 0.155
    },
    "ice40": {
        "const": 14.687,
        "banks": 0.0,
        "lanes": 0.0,
        "kluts": 4.53
    }
}

UNROLLED_PERIOD_NS = {
    "ecp5": {
        "const": 12.905,
        "kbits": 0.902
    },
    "ice40": {
        "const": 37.723,
        "kbits": 2.341
    }
}
