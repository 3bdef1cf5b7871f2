import pytest

import sq_jax as sq


def test_default_registry_extents_and_unions():
    s = sq.Spaces(i=10, a=38)
    assert s.extent("i") == 10
    assert s.extent("p") == 48
    assert s.offset_in("i", "p") == 0
    assert s.offset_in("a", "p") == 10
    # every union holding `a`: p, then SeQuant's e, x, h, α, H, κ (registration order)
    assert s.containers("a") == ("a", "p", "e", "x", "h", "α", "H", "κ")
    assert s.resolve("K") == "Κ"
    assert s.is_known("μ̃") and s.is_known("i↑") and not s.is_known("q")


def test_unknown_space_message():
    with pytest.raises(sq.SpaceError) as err:
        sq.Spaces(q=3)
    msg = str(err.value)
    assert "unknown index space 'q'" in msg
    assert "with_space('q', extent=...)" in msg


def test_missing_extent_message():
    with pytest.raises(sq.SpaceError, match=r"index space 'a' has no extent; pass it"):
        sq.Spaces(i=3).extent("p")


def test_union_extent_is_refused():
    with pytest.raises(sq.SpaceError, match=r"'p' is a union of i, a; set the extents"):
        sq.Spaces(p=3)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_bad_extent_values(bad):
    with pytest.raises(sq.SpaceError, match="must be a non-negative int"):
        sq.Spaces(i=bad)


def test_with_space_and_aliases_are_immutable_updates():
    s = sq.Spaces(i=2, a=3)
    s2 = s.with_space("y", extent=5, aliases=("Y",)).with_space("w", members=("i", "y"))
    assert not s.is_known("y")
    assert s2.extent("Y") == 5
    assert s2.extent("w") == 7
    assert s2.offset_in("y", "w") == 2
    assert s2.with_extents(y=6).extent("w") == 8
    assert s2.extent("w") == 7  # unchanged
    assert hash(s2) == hash(
        s.with_space("y", extent=5, aliases=("Y",)).with_space("w", members=("i", "y"))
    )


def test_with_space_rejects_bad_keys():
    s = sq.Spaces()
    with pytest.raises(sq.SpaceError, match="already registered"):
        s.with_space("i")
    with pytest.raises(sq.SpaceError, match="contain no digits"):
        s.with_space("x1")
    with pytest.raises(sq.SpaceError, match="takes its extent from its members"):
        s.with_space("y", members=("i",), extent=3)
    with pytest.raises(sq.SpaceError, match="not a contiguous part"):
        sq.Spaces(i=1, a=1).offset_in("p", "a")


def test_str_is_readable():
    assert str(sq.Spaces(i=2, a=3)).startswith("Spaces(i=2, a=3, p=i∪a(5)")
