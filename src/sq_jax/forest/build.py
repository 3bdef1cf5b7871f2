"""Placeholder until the forest builder lands (being written now)."""


def build_forest(equations, spaces, **kw):
    """Placeholder."""
    raise NotImplementedError
