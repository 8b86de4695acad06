"""mechinterp_icr: a workbench for in-context recall."""
__version__ = "0.1.0"
