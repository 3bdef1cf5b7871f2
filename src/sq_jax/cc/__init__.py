"""Coupled cluster on sq_jax: equations, integrals, solvers, drivers and the CLI."""
