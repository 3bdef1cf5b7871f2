"""Fuzzing the ``sq-jax`` command line (issue 14): random argument lists never escape.

Hypothesis builds argument lists from real options with good and bad values, random
tokens, missing and odd files; each runs in-process through :func:`sq_jax.cc.cli.main`.
Every run must end with status 0, 1 or 2, print no traceback, and report a status 2 as
``sq-jax: error: ...`` on stderr.

Nothing heavy runs: the CC solvers are replaced by a stub that returns the starting
amplitudes without iterating (status "iteration limit", exit 1), so a run that passes
every check still reads its system, runs PySCF's RHF for a molecule (tiny ones only),
compiles its sq_jax programs and prints its report, but solves nothing. Extents stay
small so schedule runs and memory budgets are quick.
"""

import contextlib
import io
import math
import traceback
from collections import Counter

import jax.numpy as jnp
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from sq_jax.cc import drivers
from sq_jax.cc.cli import main
from sq_jax.cc.integrals import default_spatial_system, default_system, write_sequant_tensor
from sq_jax.cc.solvers import CCResult, CCStatus, CCTimings

MAX_EXAMPLES = 120


def _no_iterations(residual_fn, energy_fn, t0, denominators, **options):
    """A solver that stops before its first iteration (the CLI's path without the cost)."""
    return CCResult(
        energy=jnp.asarray(0.0),
        amplitudes=dict(t0),
        status=CCStatus.MAX_ITERATIONS,
        converged=False,
        iterations=0,
        history=(),
        timings=CCTimings(0.0, 0.0, math.nan),
    )


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """Files the generated arguments point at: good, malformed, missing, odd."""
    d = tmp_path_factory.mktemp("fuzz")
    so, cs = default_system(), default_spatial_system()
    for stem, ints in (("so", so), ("cs", cs)):
        write_sequant_tensor(d / f"{stem}_f.dat", ints.fock, ints.nocc, ints.nvirt)
        write_sequant_tensor(d / f"{stem}_g.dat", ints.eri, ints.nocc, ints.nvirt)
    (d / "h2.xyz").write_text("2\nhydrogen\nH 0 0 0\nH 0 0 0.74\n")
    (d / "nohead.xyz").write_text("H 0 0 0\nH 0 0 0.74\n")
    (d / "oh.xyz").write_text("2\nOH\nO 0 0 0\nH 0 0 0.97\n")
    (d / "garbage.dat").write_text("2 1 1\n1\nx\n")
    (d / "binary.bin").write_bytes(b"\xff\xfe\x00\x81")
    (d / "eqs.txt").write_text("E = f{i1;a1} t{a1;i1}\n")
    (d / "dir.png").mkdir()
    return {
        "files": [str(d / n) for n in ("so_f.dat", "so_g.dat", "cs_f.dat", "cs_g.dat")]
        + [str(d / n) for n in ("garbage.dat", "binary.bin", "missing.dat", "h2.xyz")]
        + [str(d), "", "bad\0name", "x" * 5000],
        "xyz": [str(d / n) for n in ("h2.xyz", "nohead.xyz", "oh.xyz", "binary.bin")]
        + [str(d / "missing.xyz"), str(d), "h2o", "H2O", "unobtainium", "bad\0name"],
        "equations": [str(d / "eqs.txt"), str(d / "binary.bin"), str(d / "missing.txt")],
        "plots": [str(d / "p.png"), str(d / "dir.png"), "/missing/dir/p.png", "p.pdf"],
    }


def _tokens():
    """Random tokens: option-like strings, numbers, pairs, arbitrary text."""
    return st.one_of(
        st.sampled_from(["--", "-", "-h", "--help", "--q", "--m", "--fock=", "=", "a=", ",", " "]),
        st.from_regex(r"--?[a-z\-]{1,12}", fullmatch=True),
        st.integers(-(10**12), 10**12).map(str),
        st.text(max_size=12),
    )


def _cc_options(paths):
    """(option, value) lists for ccsd/ccd, values good and bad."""
    pair = st.tuples
    return st.one_of(
        pair(st.just("--molecule"), st.sampled_from(paths["xyz"])),
        pair(st.just("--basis"), st.sampled_from(["sto-3g", "STO-3G", "nosuchbasis", "", "-"])),
        pair(st.just("--charge"), st.sampled_from(["0", "1", "-1", "2", "x", "1.5", "99"])),
        pair(st.sampled_from(["--fock", "--eri"]), st.sampled_from(paths["files"])),
        pair(st.just("--e-nuc"), st.sampled_from(["9.19", "0", "nan", "inf", "x", "-1e300"])),
        pair(st.just("--batch"), st.sampled_from(["a=2", "i=2,a=2", "a=0", "a=99", "q=2", "x"])),
        pair(st.just("--memory"), st.sampled_from(["1 GiB", "1 B", "0", "abc", "1e99", "-5"])),
        pair(st.just("--solver"), st.sampled_from(["diis", "newton", "bfgs", ""])),
        pair(st.just("--max-iter"), st.sampled_from(["1", "0", "-3", "x", "²", "7"])),
        pair(st.just("--plot"), st.sampled_from(paths["plots"])),
        st.sampled_from(["--closed-shell", "--spin-orbital", "--quiet"]).map(lambda o: (o,)),
    )


def _schedule_options(paths):
    pair = st.tuples
    space = st.sampled_from(["i", "a", "K", "p", "q", "", "Κ"])
    extent = st.sampled_from(["0", "1", "2", "3", "6", "-1", "x", "1000000000"])
    spaces = st.lists(st.tuples(space, extent), max_size=4).map(
        lambda items: ",".join(f"{k}={v}" for k, v in items)
    )
    return st.one_of(
        pair(st.just("--spaces"), st.one_of(spaces, st.sampled_from(["i=2,a=3", "i=2,a=3,K=4"]))),
        pair(st.just("--batch"), st.sampled_from(["a=2", "i=2", "a=0", "a=99", "q=2", "x", ""])),
        pair(st.just("--memory"), st.sampled_from(["64 KiB", "1 B", "0", "abc", "1 GiB"])),
        pair(st.just("--plot"), st.sampled_from(paths["plots"])),
    )


def _equations(paths):
    return st.one_of(
        st.sampled_from(
            ["ccd_so", "ccsd_cs", "ccsd_so ", "nosuchset", "ccsd", *paths["equations"]]
        ),
        st.sampled_from(
            [
                "E = f{i1;a1} t{a1;i1}",
                "R{a1;i1} = f{a1;q1}",
                "R{a1;i1} = f{a1;a2} t{a2;i2}",
                "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2}",
                "E = ",
                "= x",
            ]
        ),
        st.text(max_size=30),
    )


@st.composite
def _random_argv(draw, paths):
    """A command, options drawn for it (values good and bad), random tokens mixed in."""
    command = draw(st.sampled_from(["ccsd", "ccd", "schedule", "schedule", "frobnicate", ""]))
    options = _schedule_options(paths) if command == "schedule" else _cc_options(paths)
    argv = [command] if command else []
    if command == "schedule" and draw(st.booleans()):
        argv.append(draw(_equations(paths)))
    for option in draw(st.lists(options, max_size=5)):
        argv.extend(option)
    for _ in range(draw(st.integers(0, 2))):  # random tokens at random places
        argv.insert(draw(st.integers(0, len(argv))), draw(_tokens()))
    if draw(st.integers(0, 9)) == 0 and len(argv) > 1:  # an option left without its value
        argv.pop()
    return argv


@st.composite
def _valid_argv(draw, paths):
    """A well-formed command line (tiny systems), so the runs get past the checks."""
    files = paths["files"]
    if draw(st.integers(0, 3)) == 0:
        argv = ["schedule", draw(st.sampled_from(["ccd_so", "ccsd_cs", paths["equations"][0]]))]
        argv += ["--spaces", draw(st.sampled_from(["i=2,a=3", "i=1,a=2", "i=3,a=4,K=5"]))]
        argv += draw(st.sampled_from([[], ["--batch", "a=2"], ["--memory", "4 KiB"]]))
        if argv[1] == paths["equations"][0] and draw(st.booleans()):  # pictures of a tiny one
            argv += ["--plot", paths["plots"][0]]
        return argv
    argv = [draw(st.sampled_from(["ccsd", "ccd"]))]
    argv += draw(
        st.sampled_from(
            [
                [],
                ["--molecule", paths["xyz"][0]],  # H2
                ["--molecule", paths["xyz"][0], "--basis", "6-31g", "--charge", "0"],
                ["--fock", files[0], "--eri", files[1]],  # spin-orbital files
                ["--fock", files[2], "--eri", files[3], "--e-nuc", "9.19"],  # closed-shell
            ]
        )
    )
    flags = st.sampled_from(["--closed-shell", "--spin-orbital", "--quiet"])
    argv += draw(st.lists(flags, max_size=2, unique=True))
    argv += draw(st.sampled_from([[], ["--solver", "newton"], ["--max-iter", "3"]]))
    argv += draw(st.sampled_from([[], [], ["--batch", "a=2"], ["--memory", "1 GiB"]]))
    return argv


@st.composite
def argv_lists(draw, paths):
    """Random command lines, or well-formed ones with at most one token changed."""
    kind = draw(st.sampled_from(["random", "valid", "mutated"]))
    if kind == "random":
        return draw(_random_argv(paths))
    argv = draw(_valid_argv(paths))
    if kind == "mutated":
        k = draw(st.integers(0, len(argv) - 1))
        argv[k] = draw(st.one_of(_tokens(), st.sampled_from(paths["files"] + paths["plots"])))
    return argv


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except BaseException:  # anything escaping main is the failure sought
            status = f"escaped:\n{traceback.format_exc()}"
    return status, out.getvalue(), err.getvalue()


def test_random_command_lines_never_escape(paths, monkeypatch):
    monkeypatch.setattr(drivers, "solve_diis", _no_iterations)
    monkeypatch.setattr(drivers, "solve_newton_krylov", _no_iterations)
    outcomes: Counter = Counter()

    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None)
    @given(argv=argv_lists(paths))
    def run_one(argv):
        status, out, err = _run(argv)
        outcomes[status if isinstance(status, int) else "escaped"] += 1
        event(f"exit {status if isinstance(status, int) else 'escaped'}")
        assert status in (0, 1, 2), f"{argv!r}: {status}"
        assert "Traceback" not in out + err, argv
        if status == 2:
            assert err.startswith("sq-jax: error: "), (argv, err)

    run_one()
    print(f"\nCLI fuzz: {sum(outcomes.values())} runs, outcomes {dict(outcomes)}")
    assert outcomes["escaped"] == 0 and sum(outcomes.values()) >= MAX_EXAMPLES
    assert {0, 1, 2} <= set(outcomes)  # successes, stopped solves and refusals all occur
