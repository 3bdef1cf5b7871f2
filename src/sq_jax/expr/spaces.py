"""Index spaces: which base keys exist, how they nest, and how large they are.

A :class:`Spaces` value is an immutable registry. The defaults follow SeQuant's
*minimal* single-reference convention plus its density-fitting and PAO add-ons:

========  ==========================================  =====================
key       meaning                                     kind
========  ==========================================  =====================
``i``     occupied orbitals                           base space
``a``     virtual orbitals                            base space
``p``     general orbitals, ``i`` then ``a``          union ``(i, a)``
``Κ``     density-fitting auxiliary (alias ``K``)     base space
``μ̃``     projected atomic orbitals (PAO)             base space
``i↑`` …  spin-labelled copies of ``i``, ``a``, ``p``  as their parents
========  ==========================================  =====================

A *union* space is an ordered concatenation of base spaces: in ``p`` the ``i`` orbitals
come first, so ``i`` is the sub-range ``[0, extent(i))`` of ``p`` and ``a`` the sub-range
that follows. Extents are set for base spaces only; a union's extent is the sum.

Example:
    >>> from sq_jax import Spaces
    >>> s = Spaces(i=10, a=38)
    >>> s.extent("p"), s.offset_in("a", "p"), s.resolve("K")
    (48, 10, 'Κ')
    >>> s2 = s.with_space("x", extent=50, description="test auxiliary")
    >>> s2.extent("x")
    50
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .._errors import SpaceError

__all__ = ["DEFAULT_SPACES", "IndexSpace", "Spaces"]


@dataclass(frozen=True, slots=True)
class IndexSpace:
    """One index space of the registry.

    Attributes:
        key: the base key used in index labels (``"i"`` in ``i_3``).
        description: a human-readable meaning, shown in error messages.
        members: for a union space, the base keys it concatenates in order; empty for a
            base space.
    """

    key: str
    description: str = ""
    members: tuple[str, ...] = ()

    @property
    def is_union(self) -> bool:
        """Whether this space is an ordered concatenation of base spaces."""
        return bool(self.members)


def _default_spaces() -> tuple[IndexSpace, ...]:
    spaces = [
        IndexSpace("i", "occupied"),
        IndexSpace("a", "virtual"),
        IndexSpace("p", "general (occupied then virtual)", ("i", "a")),
        IndexSpace("Κ", "density-fitting auxiliary"),
        IndexSpace("μ̃", "projected atomic orbitals"),
    ]
    for arrow, spin in (("↑", "alpha"), ("↓", "beta")):
        spaces += [
            IndexSpace("i" + arrow, f"occupied, {spin} spin"),
            IndexSpace("a" + arrow, f"virtual, {spin} spin"),
            IndexSpace("p" + arrow, f"general, {spin} spin", ("i" + arrow, "a" + arrow)),
        ]
    return tuple(spaces)


_DEFAULT_ALIASES: tuple[tuple[str, str], ...] = (("K", "Κ"),)


@dataclass(frozen=True, slots=True, init=False)
class Spaces:
    """An immutable registry of index spaces with their extents.

    Args:
        extents: a mapping from space key (or alias) to extent; keyword arguments are
            merged into it. Only base spaces take extents.

    Raises:
        SpaceError: for an unknown key, a union given an extent, or a negative extent.

    Example:
        >>> Spaces({"Κ": 120}, i=5, a=19).extent("K")
        120
    """

    spaces: tuple[IndexSpace, ...]
    """Every registered space, in registration order."""
    extents: tuple[tuple[str, int], ...]
    """(base key, extent) pairs, sorted by key."""
    aliases: tuple[tuple[str, str], ...] = field(default=_DEFAULT_ALIASES)
    """(alias, canonical key) pairs."""

    def __init__(
        self,
        extents: Mapping[str, int] | None = None,
        /,
        *,
        _spaces: tuple[IndexSpace, ...] | None = None,
        _aliases: tuple[tuple[str, str], ...] = _DEFAULT_ALIASES,
        **kw: int,
    ) -> None:
        object.__setattr__(self, "spaces", _default_spaces() if _spaces is None else _spaces)
        object.__setattr__(self, "aliases", _aliases)
        object.__setattr__(self, "extents", ())
        merged = dict(extents or {})
        merged.update(kw)
        object.__setattr__(self, "extents", self._checked_extents(merged, ()))

    # -- lookup -------------------------------------------------------------------------

    def keys(self) -> tuple[str, ...]:
        """All registered keys, in registration order (aliases excluded)."""
        return tuple(s.key for s in self.spaces)

    def is_known(self, key: str) -> bool:
        """Whether ``key`` (or the alias ``key``) names a registered space."""
        return self._canonical(key) is not None

    def resolve(self, key: str) -> str:
        """Return the canonical key for ``key`` or an alias of it.

        Raises:
            SpaceError: if no space has that key.
        """
        canon = self._canonical(key)
        if canon is None:
            raise SpaceError(
                f"unknown index space {key!r}; known spaces are "
                f"{', '.join(repr(k) for k in self.keys())}. "
                f"Register it first, e.g. spaces.with_space({key!r}, extent=...)."
            )
        return canon

    def space(self, key: str) -> IndexSpace:
        """The :class:`IndexSpace` registered under ``key`` (or its alias)."""
        canon = self.resolve(key)
        return next(s for s in self.spaces if s.key == canon)

    def base_members(self, key: str) -> tuple[str, ...]:
        """The base spaces ``key`` is made of, in order (itself for a base space)."""
        sp = self.space(key)
        return sp.members if sp.is_union else (sp.key,)

    def has_extent(self, key: str) -> bool:
        """Whether every base space under ``key`` has an extent."""
        have = dict(self.extents)
        return all(m in have for m in self.base_members(key))

    def extent(self, key: str) -> int:
        """The number of orbitals (elements) of space ``key``.

        Raises:
            SpaceError: if the space is unknown or a base space under it has no extent.
        """
        have = dict(self.extents)
        total = 0
        for m in self.base_members(key):
            if m not in have:
                raise SpaceError(
                    f"index space {m!r} has no extent; pass it, e.g. Spaces({m}=10) "
                    f"or spaces.with_extents({m}=10)."
                )
            total += have[m]
        return total

    def offset_in(self, sub: str, union: str) -> int:
        """Where the base or union space ``sub`` starts inside space ``union``.

        Raises:
            SpaceError: if ``sub`` is not a contiguous part of ``union``.
        """
        inner, outer = self.base_members(sub), self.base_members(union)
        n = len(inner)
        for start in range(len(outer) - n + 1):
            if outer[start : start + n] == inner:
                return sum(self.extent(m) for m in outer[:start])
        raise SpaceError(
            f"index space {self.resolve(sub)!r} is not a contiguous part of "
            f"{self.resolve(union)!r} (which is made of {', '.join(outer)})."
        )

    def containers(self, key: str) -> tuple[str, ...]:
        """Spaces that contain ``key`` as a contiguous sub-range: itself first, then unions."""
        canon = self.resolve(key)
        inner = self.base_members(canon)
        out = [canon]
        for sp in self.spaces:
            if sp.key == canon or not sp.is_union:
                continue
            m = sp.members
            if any(m[s : s + len(inner)] == inner for s in range(len(m) - len(inner) + 1)):
                out.append(sp.key)
        return tuple(out)

    # -- building new registries -------------------------------------------------------

    def with_extents(self, extents: Mapping[str, int] | None = None, /, **kw: int) -> Spaces:
        """A copy with more (or changed) extents.

        Example:
            >>> Spaces(i=2).with_extents(a=3).extent("p")
            5
        """
        merged = dict(extents or {})
        merged.update(kw)
        new = Spaces(_spaces=self.spaces, _aliases=self.aliases)
        object.__setattr__(new, "extents", self._checked_extents(merged, self.extents))
        return new

    def with_space(
        self,
        key: str,
        *,
        extent: int | None = None,
        members: Iterable[str] = (),
        description: str = "",
        aliases: Iterable[str] = (),
    ) -> Spaces:
        """A copy with one more space (a base space, or a union of registered ones).

        Args:
            key: the base key; letters only, as index labels need.
            extent: the extent of a base space (optional; can be set later).
            members: for a union, the keys it concatenates in order.
            description: shown in messages.
            aliases: other spellings accepted for ``key``.

        Raises:
            SpaceError: if the key is taken, not letters, or a member is unknown.

        Example:
            >>> s = Spaces(i=3, a=4).with_space("x", members=("i", "a"))
            >>> s.extent("x")
            7
        """
        if not key or any(ch.isdigit() or ch in "_{}<>;,: " for ch in key):
            raise SpaceError(
                f"index space key {key!r} must be non-empty and contain no digits, '_', "
                "brackets, ';', ',', ':' or spaces (the ordinal follows the key in a label)."
            )
        if self.is_known(key):
            raise SpaceError(f"index space {key!r} is already registered.")
        flat: list[str] = []
        for m in members:
            flat.extend(self.base_members(m))
        if members and extent is not None:
            raise SpaceError(
                f"union space {key!r} takes its extent from its members; do not pass extent."
            )
        new_aliases = self.aliases + tuple((al, key) for al in aliases)
        new = Spaces(
            _spaces=(*self.spaces, IndexSpace(key, description, tuple(flat))),
            _aliases=new_aliases,
        )
        object.__setattr__(new, "extents", self.extents)
        if extent is not None:
            object.__setattr__(new, "extents", new._checked_extents({key: extent}, self.extents))
        return new

    # -- helpers -----------------------------------------------------------------------

    def _canonical(self, key: str) -> str | None:
        for sp in self.spaces:
            if sp.key == key:
                return key
        for alias, canon in self.aliases:
            if alias == key:
                return canon
        return None

    def _checked_extents(
        self, given: Mapping[str, int], existing: tuple[tuple[str, int], ...]
    ) -> tuple[tuple[str, int], ...]:
        out = dict(existing)
        for key, value in given.items():
            canon = self.resolve(key)
            if self.space(canon).is_union:
                raise SpaceError(
                    f"index space {canon!r} is a union of {', '.join(self.space(canon).members)};"
                    " set the extents of its members instead."
                )
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpaceError(
                    f"extent of index space {canon!r} must be a non-negative int, got {value!r}."
                )
            out[canon] = value
        return tuple(sorted(out.items()))

    def __str__(self) -> str:
        have = dict(self.extents)
        parts = []
        for sp in self.spaces:
            if sp.is_union:
                ext = self.extent(sp.key) if self.has_extent(sp.key) else "?"
                parts.append(f"{sp.key}={'∪'.join(sp.members)}({ext})")
            elif sp.key in have:
                parts.append(f"{sp.key}={have[sp.key]}")
        return "Spaces(" + ", ".join(parts) + ")"


DEFAULT_SPACES = Spaces()
"""The default registry with no extents set."""
