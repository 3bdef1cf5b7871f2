"""The documentation stands alone: every file or section it names is in the repository,
and no file holds a path of one machine.

Scans the tracked text files of ``src/``, ``tests/``, ``docs/``, ``bench/``,
``notebooks/``, ``scripts/``, ``.ci/`` and ``README.md`` for

* names of markdown files (``docs/schedule.md``, ``bench/README.md``, ``results/latest.md``):
  each must resolve from the repository root or from the naming file's folder (a bare
  name such as ``latest.md``: some tracked file has it);
* a markdown file followed by a quoted section (``docs/schedule.md``, "Legality"): the file
  must have that heading (or a bold ``**…**`` label);
* pointers to design notes kept outside the repository (``shared/design``, "digest §");
* absolute paths of a machine (home, work and temporary folders) in any tracked file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

SCANNED = ("src/", "tests/", "docs/", "bench/", "notebooks/", "scripts/", ".ci/", "README.md")

# Markdown files that a script writes when it runs (named as outputs, never committed).
GENERATED = {"bench_planner.md"}

MD_NAME = re.compile(r"(?<![\w/.{-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
MD_SECTION = re.compile(r"([\w./-]+\.md)`*(?:\)|\]|`)*,\s*\"([^\"]+)\"")
OUTSIDE = re.compile(r"shared/(?:design|reference)|digest\s*§|design digest")
# Built from pieces so that this file does not match itself.
MACHINE_PATH = re.compile(
    r"(?<![\w.~])/(?:"
    + "|".join(("wo" + "rk/", "ro" + "ot/", "ho" + r"me/[a-z]", "tm" + "p/"))
    + r")"
)


def _text(repo_root: Path, rel: Path) -> str | None:
    try:
        return (repo_root / rel).read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return None  # binary data (npz, png) or a file deleted in the work tree


@pytest.fixture(scope="module")
def texts(repo_root: Path, tracked_files: list[Path]) -> dict[Path, str]:
    out = {}
    this_file = Path(__file__).resolve().relative_to(repo_root)  # it quotes the patterns
    for rel in tracked_files:
        if not str(rel).startswith(SCANNED) or rel == this_file:
            continue
        text = _text(repo_root, rel)
        if text is not None:
            out[rel] = text
    assert Path("README.md") in out and Path("src/sq_jax/__init__.py") in out
    return out


def _resolve(ref: str, where: Path, tracked: set[Path]) -> Path | None:
    for cand in (Path(ref), where.parent / ref):
        cand = Path(os.path.normpath(cand))  # ../docs/x.md from bench/README.md
        if cand in tracked:
            return cand
    if "/" not in ref:
        return next((t for t in sorted(tracked) if t.name == ref), None)
    return None


def _anchors(text: str) -> set[str]:
    heads = {m.strip() for m in re.findall(r"^#+\s+(.+?)\s*$", text, re.M)}
    bold = {m.strip() for m in re.findall(r"\*\*([^*]+?)\*\*", text)}
    return heads | bold | {h.split(" (")[0] for h in heads}


def test_named_markdown_files_exist(texts, tracked_files):
    tracked = set(tracked_files)
    missing = []
    for rel, text in texts.items():
        for ref in set(MD_NAME.findall(text)):
            if ref not in GENERATED and _resolve(ref, rel, tracked) is None:
                missing.append(f"{rel}: {ref}")
    assert not missing, "files named but not in the repository:\n" + "\n".join(sorted(missing))


def test_named_sections_exist(repo_root, texts, tracked_files):
    tracked = set(tracked_files)
    missing, checked = [], 0
    for rel, text in texts.items():
        for ref, section in MD_SECTION.findall(text):
            target = _resolve(ref, rel, tracked)
            if target is None:
                continue  # reported by test_named_markdown_files_exist
            title = " ".join(section.split())  # a quoted section may wrap in a docstring
            checked += 1
            if title not in _anchors((repo_root / target).read_text(encoding="utf-8")):
                missing.append(f'{rel}: {ref}, "{title}"')
    assert not missing, "sections named but not found:\n" + "\n".join(sorted(missing))
    assert checked >= 10, f"only {checked} section references found: is the pattern stale?"


def test_no_pointer_to_design_files_outside_the_repository(texts):
    found = [
        f"{rel}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)}"
        for rel, text in texts.items()
        for m in OUTSIDE.finditer(text)
    ]
    assert not found, "point to docs/ instead of:\n" + "\n".join(found)


def test_no_absolute_path_of_a_machine(repo_root, tracked_files):
    found = []
    for rel in tracked_files:
        text = _text(repo_root, rel)
        if text is None:
            continue
        for m in MACHINE_PATH.finditer(text):
            line = text[: m.start()].count("\n") + 1
            found.append(f"{rel}:{line}: {text[m.start() : m.start() + 40].splitlines()[0]}")
    assert not found, "absolute paths of one machine:\n" + "\n".join(found)


def test_the_scan_sees_what_it_checks(texts):
    """The patterns still match the references they are meant to find (else the tests
    above would pass vacuously)."""
    sample = 'see ``docs/schedule.md``, "Legality", and bench/README.md; not /' + "tmp/x"
    assert MD_NAME.findall(sample) == ["docs/schedule.md", "bench/README.md"]
    assert MD_SECTION.findall(sample) == [("docs/schedule.md", "Legality")]
    assert MACHINE_PATH.search(sample)
    assert OUTSIDE.search("the scheduler digest §5")
    assert sum("docs/schedule.md" in t for t in texts.values()) >= 5
