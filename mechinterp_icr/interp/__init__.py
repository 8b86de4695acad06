"""Interpretability toolkit: caching, attention roles, circuits, patching, task vectors, probes."""
