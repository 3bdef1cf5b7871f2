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

__all__ = ["DIIS", "pulay_coefficients"]


def pulay_coefficients(overlaps: Any, valid: Any, xp: Any = np) -> Any:
    """Pulay's coefficients c: minimize ‖Σ c_i e_i‖ subject to Σ c_i = 1.

    The overlap block is divided by its largest valid diagonal element, so the system's
    conditioning does not depend on how small the errors have become, and solved by
    least squares with ``rcond=1e-14``, so nearly dependent errors do not blow up c.
    Slots with ``valid`` False (unused buffer rows of a fixed-size, traced DIIS) get
    an identity row and a zero coefficient.

    Args:
        overlaps: the (n, n) matrix ⟨e_i|e_j⟩.
        valid: (n,) booleans, the slots in use.
        xp: ``numpy`` (on the host) or ``jax.numpy`` (traceable, e.g. in a while loop).

    Returns:
        The (n,) coefficients, zero in invalid slots.

    Example:
        >>> import numpy as np
        >>> c = pulay_coefficients(np.diag([1.0, 4.0]), np.ones(2, bool))
        >>> [round(float(v), 12) for v in c]
        [0.8, 0.2]
    """
    n = overlaps.shape[0]
    both = valid[:, None] & valid[None, :]
    scale = xp.maximum(xp.max(xp.where(valid, xp.abs(xp.diag(overlaps)), 0.0)), 1e-300)
    block = xp.where(both, overlaps / scale, xp.eye(n, dtype=overlaps.dtype))
    border = -valid.astype(overlaps.dtype)
    last_row = xp.concatenate([border, xp.zeros(1, overlaps.dtype)])
    bordered = xp.concatenate([xp.concatenate([block, border[:, None]], axis=1), last_row[None]])
    rhs = xp.concatenate([xp.zeros(n, overlaps.dtype), -xp.ones(1, overlaps.dtype)])
    c = xp.linalg.lstsq(bordered, rhs, rcond=1e-14)[0][:n]
    return xp.where(valid, c, 0.0)


class DIIS:
    """The last ``space`` (vector, error) pairs and their Pulay extrapolation.

    The extrapolation is Σ c_i v_i with c from :func:`pulay_coefficients`.

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
        coefficients = pulay_coefficients(self._overlaps, np.ones(n, dtype=bool))
        x = coefficients[0] * self._vectors[0]
        for c, v in zip(coefficients[1:], self._vectors[1:], strict=True):
            x = x + c * v
        return x
