"""What skipped in a meson test log (issue #25 item 2), for scripts/reliability_doc.py and
scripts/check-must-run.py.

meson's testlog.json holds one JSON object a line per test: "name" ("project:suite+suite / test"),
"result" ("OK", "FAIL", "SKIP" for exit 77, ...) and "stdout". A gtest binary's output ends with
"[  SKIPPED ] N tests, listed below:" and one "[  SKIPPED ] Suite.Case" line per skipped case
whenever a case called GTEST_SKIP, even in a test meson counts as OK. A test that runs several
gtest binaries (the soft-RoCE VM's) prints several such lists: all are counted.
"""
import json
import re

_LIST = re.compile(r"^\[  SKIPPED \] [0-9]+ tests?, listed below:$")
_CASE = re.compile(r"^\[  SKIPPED \] (\S+)$")


def load(path):
    """The tests of a testlog.json, in order; a missing file is None, a bad line is left out."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    tests = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                tests.append(json.loads(line))
            except ValueError:
                pass
    return tests


def name(test):
    return test["name"].split(" / ")[-1]


def suites(test):
    return set(test["name"].split(" / ")[0].split(":", 1)[-1].split("+"))


def skipped_cases(test):
    """The gtest cases that skipped inside a test, from the lists gtest prints at its end."""
    cases = []
    listing = False
    for line in (test.get("stdout") or "").splitlines():
        line = line.rstrip()
        if _LIST.match(line):
            listing = True
            continue
        m = _CASE.match(line) if listing else None
        if m:
            cases.append(m[1])
        else:
            listing = False
    return cases
