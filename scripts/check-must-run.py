#!/usr/bin/env python3
"""Fails when a test that CI must run skipped (issue #25 item 2).

  scripts/check-must-run.py [--allow-absent] TESTLOG.json

test.sh's main stage runs this on meson's testlog.json when FERRY_REQUIRE_ALL=1, which a plain
./test.sh (CI's run: .ci/run) sets: CI runs on a fresh Debian 12 machine that scripts/deps.sh has
given everything, as root, so a skip of these tests means a broken setup, not a missing option.
A rule fails when a test it names
  - was skipped by meson (exit 77: launcher missing, Slurm not starting, not root, no VM), or,
    for rules marked 'cases', has a gtest case skipped inside it (GTEST_SKIP in a passing test);
  - is absent from the log (not built, or filtered out), unless --allow-absent.
Exit 0 when every rule holds, 1 with one line per broken rule.
"""
import fnmatch
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtest_skips  # noqa: E402

# (tests, cases): "suite:NAME" or a glob over meson test names; cases: a skipped gtest case inside
# fails too. The rdma suite's cases skip by capability (one device has no second one, UCX's rc
# transport has no target checks, the bench's verbs kernels on the host), so there only a skip of
# the whole test (the VM not booting) fails.
RULES = [
    ("suite:launch", True),       # ferry-launch, mpirun, a single-node Slurm (tests/launch)
    ("train_launchers_*", True),  # ferry-train under mpirun, under srun
    ("train_replicas", True),     # a killed server under mpirun --enable-recovery and srun
    ("train_liblinear", True),    # LIBLINEAR is a dependency (liblinear-tools)
    ("suite:netns", True),        # network namespaces: root, ip, nft
    ("suite:rdma", False),        # the soft-RoCE VM (tools/softroce/ferry-vm)
    ("install_deb", False),       # the packages the main stage built (dpkg-buildpackage)
    ("install_lintian", False),   # lintian over them
]


def matches(rule, test):
    if rule.startswith("suite:"):
        return rule[len("suite:"):] in gtest_skips.suites(test)
    return fnmatch.fnmatchcase(gtest_skips.name(test), rule)


def main(argv):
    allow_absent = "--allow-absent" in argv
    paths = [a for a in argv if a != "--allow-absent"]
    if len(paths) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    tests = gtest_skips.load(paths[0])
    if tests is None:
        print(f"must-run: no test log at {paths[0]}")
        return 1
    problems = []
    for rule, cases in RULES:
        hit = [t for t in tests if matches(rule, t)]
        if not hit and not allow_absent:
            problems.append(f"{rule}: no such test ran (not built, or filtered out)")
        for t in hit:
            if t["result"] == "SKIP":
                reason = [line for line in (t.get("stdout") or "").splitlines()
                          if "SKIP" in line or "skip" in line][:2]
                problems.append(f"{gtest_skips.name(t)}: skipped by meson (exit 77)"
                                + (": " + " / ".join(reason) if reason else ""))
            elif cases:
                skipped = gtest_skips.skipped_cases(t)
                if skipped:
                    problems.append(f"{gtest_skips.name(t)}: {len(skipped)} gtest case(s) skipped: "
                                    + ", ".join(skipped))
    for p in problems:
        print(f"must-run: FAILED: {p}")
    if problems:
        print(f"must-run: {len(problems)} test(s) CI must run did not run in full "
              "(FERRY_REQUIRE_ALL=1; rules in scripts/check-must-run.py)")
        return 1
    print(f"must-run: ok ({len(RULES)} rules, no skip)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
