"""Lowering of an ordered schedule to one jitted JAX program."""
