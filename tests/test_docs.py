"""The documentation describes the repository as it is: no issue numbers (they cannot be looked up from the
repository), no file that does not exist, no command-line flag that no command defines."""
from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = sorted([os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))

#: an issue cited by number: "issue 13", "issues 12 and 13", "issue #4", "issue-30", "(#12)"
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\b[Ii]ssue-\d+|\(#\d+\)")
#: a path in the repository: under one of its top-level folders, with an extension
PATH = re.compile(r"(?<![\w/.-])((?:backends|circuitgrad|bench|tests|examples|scripts|docs|\.ci)/[\w./*-]*[\w*])")
#: a relative link of a Markdown file: [text](target#anchor)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
#: a command of this repository in a line or code span: the flags after it are its own
COMMAND = re.compile(r"(?:\bcircuitgrad\s+[a-z]|(?:bench|examples|scripts)/[\w-]+\.(?:py|sh)|\.ci/run)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
#: where the commands are defined: the repository's top-level folders but the tests, the docs and build output
SOURCES = tuple(d for d in sorted(os.listdir(ROOT)) if os.path.isdir(os.path.join(ROOT, d))
                and (d == ".ci" or not d.startswith(".")) and d not in ("tests", "docs", "build")
                and not d.endswith(".egg-info"))


def _lines(path: str):
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            yield number, line


def _name(path: str) -> str:
    return os.path.relpath(path, ROOT)


def _issues(path: str) -> list[str]:
    return [f"{_name(path)}:{n}: {m.group(0)}" for n, line in _lines(path) for m in ISSUE.finditer(line)]


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_docs_cite_no_issue_numbers(path):
    found = _issues(path)
    assert not found, "issue numbers cannot be looked up from the repository; say what changed instead:\n" + \
        "\n".join(found)


def _exists(rel: str) -> bool:
    """Whether ``rel`` names something in the repository: a file or folder, a glob that matches, a module's
    attribute (``bench/_util.medians``: the file ``bench/_util.py``), or a placeholder (``examples/NAME.py``)."""
    rel = rel.rstrip(".")
    if re.search(r"(^|/)[A-Z]{2,}(\.|/|$)", rel):
        return True
    if any(c in rel for c in "*?["):
        return bool(glob.glob(os.path.join(ROOT, rel)))
    if os.path.exists(os.path.join(ROOT, rel)):
        return True
    module, _, attribute = rel.rpartition(".")
    return bool(attribute) and "/" not in attribute and os.path.exists(os.path.join(ROOT, module + ".py"))


def _missing(path: str) -> list[str]:
    here = os.path.dirname(path)
    missing = []
    for n, line in _lines(path):
        for m in PATH.finditer(line):
            if not _exists(m.group(1)):
                missing.append(f"{_name(path)}:{n}: {m.group(1)}")
        for m in LINK.finditer(line):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(here, target))):
                missing.append(f"{_name(path)}:{n}: link {target}")
    return missing


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_docs_name_only_files_that_exist(path):
    missing = _missing(path)
    assert not missing, "files the docs name that do not exist:\n" + "\n".join(missing)


def _source_text() -> str:
    parts = []
    for top in SOURCES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".py", ".sh")) or top == ".ci":
                    with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                        parts.append(fh.read())
    return "\n".join(parts)


@pytest.fixture(scope="module")
def sources() -> str:
    return _source_text()


def _segments(line: str):
    """The code spans of a prose line, or the whole line inside a code block."""
    spans = re.findall(r"`([^`]+)`", line)
    return spans or [line]


def _unknown_flags(path: str, sources: str) -> list[str]:
    unknown, in_block = [], False
    for n, line in _lines(path):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        for seg in ([line] if in_block else _segments(line)):
            start = COMMAND.search(seg)
            if start is None:
                continue
            for m in FLAG.finditer(seg, start.start()):
                if not any(f"{m.group(1)}{end}" in sources for end in ('"', "'", " ", "=")):
                    unknown.append(f"{_name(path)}:{n}: {m.group(1)}")
    return unknown


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_docs_name_only_flags_that_a_command_defines(path, sources):
    unknown = _unknown_flags(path, sources)
    assert not unknown, "flags the docs give to this repository's commands that none defines:\n" + "\n".join(unknown)


def test_the_checks_find_what_they_look_for(tmp_path, sources):
    """Each check finds its kind of mistake in a page that has one, and passes what is there."""
    page = tmp_path / "page.md"
    page.write_text("Since issue 12 and (#7), `bench/prover.py --repeats 3 --no-such-flag` reads\n"
                    "`backends/zk/no_such_module.py`, `backends/zk/cost.prover_seconds` and [a](missing.md).\n"
                    "```\ncircuitgrad zk prove examples/tinygpt.py --width 20 --bogus\n```\n", encoding="utf-8")
    path = str(page)
    assert [x.split(": ", 1)[1] for x in _issues(path)] == ["issue 12", "(#7)"]
    assert [x.split(": ", 1)[1] for x in _missing(path)] == ["backends/zk/no_such_module.py", "link missing.md"]
    assert [x.split(": ", 1)[1] for x in _unknown_flags(path, sources)] == ["--no-such-flag", "--bogus"]


#: the size a newcomer can read in an afternoon: the README, the architecture map and everything together
BUDGETS = {"README.md": 3000, "docs": 25000}
ARCHITECTURE_LINES = 300


def _words(path: str) -> int:
    return len(open(path, encoding="utf-8").read().split())


def test_docs_stay_within_their_budgets():
    total = sum(_words(p) for p in DOCS)
    assert total <= BUDGETS["docs"], f"the docs hold {total} words, more than {BUDGETS['docs']}: move history to git"
    readme = _words(os.path.join(ROOT, "README.md"))
    assert readme <= BUDGETS["README.md"], f"README.md holds {readme} words, more than {BUDGETS['README.md']}"
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as fh:
        lines = sum(1 for _ in fh)
    assert lines <= ARCHITECTURE_LINES, f"docs/ARCHITECTURE.md has {lines} lines: it is a map, at most {ARCHITECTURE_LINES}"


def test_every_decision_record_is_dated_and_indexed():
    folder = os.path.join(ROOT, "docs", "decisions")
    records = sorted(f for f in os.listdir(folder) if f != "README.md")
    index = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    assert records and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", f) for f in records), records
    assert [f for f in records if f"({f})" not in index] == []
