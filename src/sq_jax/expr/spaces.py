"""Index spaces: which base keys exist, how they nest, and how large they are.

A :class:`Spaces` value is an immutable registry. The defaults are SeQuant's standard
single-reference spaces (its ``SR`` and ``F12`` conventions, which contain the *minimal*
one) plus its density-fitting and PAO add-ons, so pasted SeQuant output parses as is:

=========  =============================================  ==========================
key        meaning                                        kind
=========  =============================================  ==========================
``i``      (active) occupied orbitals                     base space
``a``      (active) virtual orbitals                      base space
``o``      frozen-core occupied orbitals                  base space, empty by default
``g``      inactive (frozen) virtual orbitals             base space, empty by default
``α'``     complementary auxiliary basis (CABS, F12)      base space, empty by default
``p``      general orbitals: ``o``, ``i``, ``a``, ``g``   union
``m``      occupied: ``o`` then ``i``                     union
``e``      virtual: ``a`` then ``g``                      union
``x``      active: ``i`` then ``a``                       union
``h``      ``i``, ``a`` then ``g``                        union
``c``      ``g`` then ``α'``                              union
``α``      complete virtual: ``a``, ``g``, ``α'``         union
``H``      ``i`` then ``α``                               union
``κ``      complete: ``p`` then ``α'``                    union
``Κ``      density-fitting auxiliary (alias ``K``)        base space
``μ̃``      projected atomic orbitals (PAO)                base space
``i↑`` …   spin-labelled copies of every orbital space    as their parents
=========  =============================================  ==========================

A *union* space is an ordered concatenation of base spaces: in ``p`` the ``i`` orbitals
come before the ``a`` orbitals, so ``i`` is a sub-range of ``p`` and ``a`` the sub-range
that follows. Extents are set for base spaces only; a union's extent is the sum.

A base space that is *empty by default* (``o``, ``g``, ``α'``) counts as 0 elements inside
a union until it is given an extent: with only ``i`` and ``a`` set, ``p`` is ``i`` then
``a`` (SeQuant's minimal convention) and ``x``, ``h`` and ``κ`` equal it. Set ``o=2`` and
``p`` becomes the 2 frozen-core orbitals, then ``i``, then ``a``. An index *in* such a
space still needs its extent (a missing one is a :class:`~sq_jax.SpaceError`, never an
empty tensor).

Example:
    >>> from sq_jax import Spaces
    >>> s = Spaces(i=10, a=38)
    >>> s.extent("p"), s.offset_in("a", "p"), s.resolve("K")
    (48, 10, 'Κ')
    >>> s2 = s.with_space("y", extent=50, description="test auxiliary")
    >>> s2.extent("y")
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
        empty_by_default: for a base space, whether it counts as 0 elements inside a
            union until it is given an extent (SeQuant's frozen core ``o``, say).
    """

    key: str
    description: str = ""
    members: tuple[str, ...] = ()
    empty_by_default: bool = False

    @property
    def is_union(self) -> bool:
        """Whether this space is an ordered concatenation of base spaces."""
        return bool(self.members)


_ORBITAL_BASES = (
    ("i", "occupied", False),
    ("a", "virtual", False),
    ("o", "frozen-core occupied", True),
    ("g", "inactive (frozen) virtual", True),
    ("α'", "complementary auxiliary basis (CABS)", True),
)
_ORBITAL_UNIONS = (
    ("p", "general: o, i, a, g", ("o", "i", "a", "g")),
    ("m", "occupied: o then i", ("o", "i")),
    ("e", "virtual: a then g", ("a", "g")),
    ("x", "active: i then a", ("i", "a")),
    ("h", "i, a then g", ("i", "a", "g")),
    ("c", "g then α'", ("g", "α'")),
    ("α", "complete virtual: a, g, α'", ("a", "g", "α'")),
    ("H", "i then α", ("i", "a", "g", "α'")),
    ("κ", "complete: p then α'", ("o", "i", "a", "g", "α'")),
)
"""SeQuant's standard single-reference spaces (SR and F12 conventions), in its letters."""


def _default_spaces() -> tuple[IndexSpace, ...]:
    first = ("i", "a", "p")  # registration order is the order messages list keys in
    unions = {key: (desc, members) for key, desc, members in _ORBITAL_UNIONS}
    bases = {key: (desc, empty) for key, desc, empty in _ORBITAL_BASES}

    def orbital(key: str, spin: str = "", label: str = "") -> IndexSpace:
        if key in unions:
            desc, members = unions[key]
            return IndexSpace(key + spin, desc + label, tuple(m + spin for m in members))
        desc, empty = bases[key]
        return IndexSpace(key + spin, desc + label, empty_by_default=empty)

    spaces = [orbital(k) for k in first]
    spaces += [
        IndexSpace("Κ", "density-fitting auxiliary"),
        IndexSpace("μ̃", "projected atomic orbitals"),
    ]
    rest = [k for k in (*bases, *unions) if k not in first]
    for arrow, spin in (("↑", "alpha"), ("↓", "beta")):
        spaces += [orbital(k, arrow, f", {spin} spin") for k in first]
    spaces += [orbital(k) for k in rest]
    for arrow, spin in (("↑", "alpha"), ("↓", "beta")):
        spaces += [orbital(k, arrow, f", {spin} spin") for k in rest]
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
    _extent_memo: dict[str, tuple[tuple[tuple[str, int], ...], int]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    """:meth:`extent` per key, with the ``extents`` it was computed from (the planner
    asks for extents per buffer and per batch count)."""

    def __init__(
        self,
        extents: Mapping[str, int] | None = None,
        /,
        *,
        _spaces: tuple[IndexSpace, ...] | None = None,
        _aliases: tuple[tuple[str, str], ...] = _DEFAULT_ALIASES,
        **kw: int,
    ) -> None:
        object.__setattr__(self, "_extent_memo", {})
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
        """Whether ``key`` has an extent (a union: every member not empty by default has).

        Example:
            >>> Spaces(i=2, a=3).has_extent("p"), Spaces(i=2, a=3).has_extent("o")
            (True, False)
        """
        have = dict(self.extents)
        if not self.space(key).is_union:
            return self.resolve(key) in have
        members = self.base_members(key)
        return bool(self.shown_members(key)) and all(
            m in have or self.space(m).empty_by_default for m in members
        )

    def _member_extent(self, member: str, have: Mapping[str, int]) -> int:
        if member in have:
            return have[member]
        if self.space(member).empty_by_default:
            return 0
        raise SpaceError(
            f"index space {member!r} has no extent; pass it, e.g. Spaces({member}=10) "
            f"or spaces.with_extents({member}=10)."
        )

    def shown_members(self, key: str) -> tuple[str, ...]:
        """A union's members that hold elements (shown in messages and ``str()``).

        Empty-by-default members without an extent are left out: ``p`` shows as ``i, a``
        until ``o`` or ``g`` is set.

        Example:
            >>> Spaces(i=2, a=3).shown_members("p"), Spaces(o=1).shown_members("m")
            (('i', 'a'), ('o', 'i'))
        """
        have = dict(self.extents)
        return tuple(
            m for m in self.base_members(key) if m in have or not self.space(m).empty_by_default
        )

    def extent(self, key: str) -> int:
        """The number of orbitals (elements) of space ``key``.

        Raises:
            SpaceError: if the space is unknown or a base space under it has no extent.
        """
        hit = self._extent_memo.get(key)
        if hit is not None and hit[0] is self.extents:
            return hit[1]
        value = self._extent(key)
        self._extent_memo[key] = (self.extents, value)
        return value

    def _extent(self, key: str) -> int:
        have = dict(self.extents)
        if not self.space(key).is_union:
            canon = self.resolve(key)
            if canon not in have:
                hint = (
                    " (it is empty by default only inside unions such as p)"
                    if self.space(canon).empty_by_default
                    else ""
                )
                raise SpaceError(
                    f"index space {canon!r} has no extent{hint}; pass it, e.g. "
                    f"Spaces({canon}=10) or spaces.with_extents({canon}=10)."
                )
            return have[canon]
        if not self.shown_members(key):
            members = ", ".join(self.base_members(key))
            raise SpaceError(
                f"index space {self.resolve(key)!r} ({members}) has no elements: its members "
                f"are empty until given an extent; set one, e.g. "
                f"Spaces({self.base_members(key)[0]}=10)."
            )
        return sum(self._member_extent(m, have) for m in self.base_members(key))

    def offset_in(self, sub: str, union: str) -> int:
        """Where the base or union space ``sub`` starts inside space ``union``.

        Raises:
            SpaceError: if ``sub`` is not a contiguous part of ``union``.
        """
        inner, outer = self.base_members(sub), self.base_members(union)
        n = len(inner)
        for start in range(len(outer) - n + 1):
            if outer[start : start + n] == inner:
                have = dict(self.extents)
                return sum(self._member_extent(m, have) for m in outer[:start])
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
            >>> s = Spaces(i=3, a=4).with_space("w", members=("i", "a"))
            >>> s.extent("w")
            7
        """
        if not key or any(ch.isdigit() or ch in "_{}<>;,: " for ch in key):
            raise SpaceError(
                f"index space key {key!r} must be non-empty and contain no digits, '_', "
                "brackets, ';', ',', ':' or spaces (the ordinal follows the key in a label)."
            )
        if self.is_known(key):
            known = self.space(key)
            what = f"the union {' ∪ '.join(known.members)}" if known.is_union else "a base space"
            raise SpaceError(
                f"index space {key!r} is already registered ({known.description or what}); "
                "use it as it is, or register yours under another key."
            )
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
                    f"index space {canon!r} is a union of {', '.join(self.shown_members(canon))};"
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
                optional_set = any(m in have and self.space(m).empty_by_default for m in sp.members)
                if sp.key not in ("p", "p↑", "p↓") and not (
                    optional_set and self.has_extent(sp.key)
                ):
                    continue  # p always; SeQuant's other unions once o, g or α' is set
                ext = self.extent(sp.key) if self.has_extent(sp.key) else "?"
                parts.append(f"{sp.key}={'∪'.join(self.shown_members(sp.key))}({ext})")
            elif sp.key in have:
                parts.append(f"{sp.key}={have[sp.key]}")
        return "Spaces(" + ", ".join(parts) + ")"


DEFAULT_SPACES = Spaces()
"""The default registry with no extents set."""
