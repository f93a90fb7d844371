"""Backends (installed as ``petab_sciml.backends``): ``torch`` and ``jax``."""
