"""petab-sciml: PEtab SciML networks and problems in PyTorch and JAX."""
