"""The strict .xyz reader of the command line."""

import pytest

from sq_jax._errors import InputError
from sq_jax.cc.xyz import molecule_geometry, parse_xyz, read_xyz

WATER = "3\nwater\nO 0 0 0.1173\nH 0 0.7572 -0.4692\nH 0 -0.7572 -0.4692\n"


def test_reads_the_standard_format():
    geometry = parse_xyz(WATER + "\n\n")  # trailing blank lines are fine
    assert geometry.symbols == ("O", "H", "H") and geometry.comment == "water"
    assert geometry.coordinates[2] == (0.0, -0.7572, -0.4692)
    assert geometry.coordinates == molecule_geometry("h2o").coordinates  # the shipped one
    assert parse_xyz("1\n\ncl 0 0 0").symbols == ("Cl",)  # symbols in any case
    assert parse_xyz("1\n\nHe 0 0 0").electron_count() == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: expected the number of atoms (a positive integer); found ''"),
        ("0\nnone\n", "line 1: expected the number of atoms"),
        ("²\nx\nH 0 0 0\n", "line 1: expected the number of atoms"),
        ("2\nH2\nH 0 0 0\n", "line 1 announces 2 atoms but 1 atom lines follow"),
        ("1\nH\nH 0 0 0\nH 0 0 1\n", "line 1 announces 1 atoms but 2 atom lines follow"),
        (
            "2\nH2\nH 0 0 0\nH 0 0\n",
            "line 4: expected 4 fields `Symbol x y z`, not 3; found 'H 0 0'",
        ),
        ("1\nx\nQ 0 0 0\n", "line 3: expected an element symbol such as H, C, O or Cl; found 'Q'"),
        ("1\nx\nH 0 zero 0\n", "line 3: expected three numbers x y z after the symbol"),
        ("1\nx\nH 0 nan 0\n", "line 3: expected finite coordinates"),
        ("2\nx\nH 0 0 0\nH 0 0 0.01\n", "atoms on lines 3 and 4 are 0.01 Å apart"),
    ],
)
def test_every_problem_names_its_line(text, message):
    with pytest.raises(InputError) as err:
        parse_xyz(text, source="m.xyz")
    assert str(err.value).startswith("m.xyz") and message in str(err.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match=r"cannot read the \.xyz file"):
        read_xyz(tmp_path / "missing.xyz")
    (tmp_path / "bin.xyz").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match=r"cannot read the \.xyz file"):
        read_xyz(tmp_path / "bin.xyz")
    with pytest.raises(InputError, match="unknown molecule 'h3o'; known names: h2o"):
        molecule_geometry("h3o")
