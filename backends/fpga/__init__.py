"""The fpga backend: not implemented yet (see docs/ARCHITECTURE.md for the plan).

Its rule table is empty, so the conformance test reports every primitive
as missing for this backend.
"""
RULES: dict = {}
UNSUPPORTED: dict = {}

__all__ = ["RULES", "UNSUPPORTED"]
