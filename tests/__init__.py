"""sq_jax's tests, a package so that shared helpers import by their full name.

Test modules import helpers as ``from tests.helpers.corpus import ...`` (never by bare
module name) and never import from another test module; fixtures shared by several
files live in ``tests/conftest.py``.
"""
