"""Pulay's DIIS extrapolation as one reusable object: push vectors, then extrapolate.

The stored vectors and error vectors stay wherever the caller's arrays live (on the
device for JAX arrays); only the small matrix of error overlaps ⟨e_i|e_j⟩ is kept on the
host, grown by one row per push, so each push costs one dot product per stored vector.

References:
    P. Pulay, Chem. Phys. Lett. 73, 393 (1980); J. Comput. Chem. 3, 556 (1982).

Example:
    >>> import jax.numpy as jnp
    >>> diis = DIIS(space=3)
    >>> diis.push(jnp.array([1.0, 0.0]), jnp.array([1.0, 0.0]))
    >>> diis.push(jnp.array([0.0, 1.0]), jnp.array([-1.0, 0.0]))
    >>> diis.can_extrapolate, [float(v) for v in diis.extrapolate()]
    (True, [0.5, 0.5])
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from .._errors import InputError

__all__ = ["DIIS"]


class DIIS:
    """The last ``space`` (vector, error) pairs and their Pulay extrapolation.

    The extrapolation is Σ c_i v_i with the coefficients c that minimize ‖Σ c_i e_i‖
    subject to Σ c_i = 1 (the bordered linear system of Pulay). The overlap block is
    divided by its largest diagonal element first, so the system's conditioning does not
    depend on how small the errors have become; it is solved by least squares with
    ``rcond=1e-14``, so nearly linearly dependent errors do not blow up the coefficients.

    Args:
        space: how many pairs to keep (the oldest is dropped first); at least 1.

    Raises:
        InputError: if ``space`` is not a whole number of at least 1.

    Example:
        >>> import numpy as np
        >>> diis = DIIS(space=2)
        >>> for v in (1.0, 2.0, 4.0):
        ...     diis.push(np.array([v]), np.array([v - 3.0]))
        >>> len(diis), float(diis.extrapolate()[0])
        (2, 3.0)
    """

    def __init__(self, space: int) -> None:
        if isinstance(space, bool) or not isinstance(space, int | np.integer) or space < 1:
            raise InputError(f"DIIS space must be a whole number >= 1; received {space!r}.")
        self.space = int(space)
        self._vectors: list[Any] = []
        self._errors: list[Any] = []
        self._overlaps = np.zeros((0, 0))

    def __len__(self) -> int:
        return len(self._vectors)

    def push(self, vector: Any, error: Any) -> None:
        """Store a vector with its error vector, dropping the oldest pair when full.

        Args:
            vector: the vector (e.g. Jacobi-updated amplitudes, raveled).
            error: its error vector (e.g. the amplitude change), same shape.

        Example:
            >>> import numpy as np
            >>> diis = DIIS(space=4)
            >>> diis.push(np.ones(2), np.zeros(2))
            >>> len(diis)
            1
        """
        if len(self._vectors) == self.space:
            self._vectors, self._errors = self._vectors[1:], self._errors[1:]
            self._overlaps = self._overlaps[1:, 1:]
        norm = float(jnp.linalg.norm(error))
        row = np.array([float(jnp.vdot(e, error)) for e in self._errors] + [norm**2])
        self._vectors.append(vector)
        self._errors.append(error)
        n = len(self._errors)
        grown = np.zeros((n, n))
        grown[: n - 1, : n - 1] = self._overlaps
        grown[n - 1, :] = grown[:, n - 1] = row
        self._overlaps = grown

    @property
    def can_extrapolate(self) -> bool:
        """Whether at least two pairs are stored and every overlap is finite."""
        return len(self._vectors) > 1 and bool(np.all(np.isfinite(self._overlaps)))

    def extrapolate(self) -> Any:
        """The Pulay extrapolation of the stored vectors.

        Returns:
            Σ c_i v_i, an array like the stored vectors.

        Raises:
            InputError: if nothing has been pushed yet.

        Example:
            >>> import numpy as np
            >>> diis = DIIS(space=2)
            >>> diis.push(np.array([2.0]), np.array([0.5]))
            >>> round(float(diis.extrapolate()[0]), 12)  # one vector: itself
            2.0
        """
        n = len(self._vectors)
        if n == 0:
            raise InputError("DIIS.extrapolate: no vectors stored; call push() first.")
        bordered = np.zeros((n + 1, n + 1))
        scale = max(float(np.max(np.abs(np.diag(self._overlaps)))), 1e-300)
        bordered[:n, :n] = self._overlaps / scale
        bordered[n, :n] = bordered[:n, n] = -1.0
        rhs = np.zeros(n + 1)
        rhs[n] = -1.0
        coefficients = np.linalg.lstsq(bordered, rhs, rcond=1e-14)[0][:n]
        x = coefficients[0] * self._vectors[0]
        for c, v in zip(coefficients[1:], self._vectors[1:], strict=True):
            x = x + c * v
        return x
