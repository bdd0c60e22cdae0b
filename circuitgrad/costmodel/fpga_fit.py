"""LUT4 model coefficients per FPGA family, fitted by ``python bench/fpga_estimate.py --fit``.

Fitted to yosys synthesis (synth_ecp5 / synth_ice40 -dsp) of 15 training designs at 1 and
2 and 4 MAC lanes and one read port, by non-negative least squares; features as :data:`circuitgrad.costmodel.fpga.FEATURES`. Generated: do not edit by hand.
"""
LUT4 = {
    "ecp5": {
        "const": 278.387,
        "rom": 0.548,
        "lanes": 66.117,
        "one_port": 85.796,
        "sequential": 268.606,
        "exp": 199.843,
        "sigmoid": 37.618,
        "tanh": 70.984,
        "compare": 0.0,
        "lutram": 308.575,
        "blocks": 4.627
    },
    "ice40": {
        "const": 428.47,
        "rom": 0.38,
        "lanes": 59.65,
        "one_port": 76.03,
        "sequential": 422.102,
        "exp": 241.772,
        "sigmoid": 129.32,
        "tanh": 134.216,
        "compare": 0.0,
        "blocks": 13.652
    }
}
