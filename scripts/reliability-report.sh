#!/usr/bin/env bash
# Regenerates docs/reliability.md with a longer fuzzing budget than CI's: the whole ./test.sh run
# (every stage: the main build's suites with the netns faults, the PS and training failure and
# replica tests, the soft-RoCE VM; ASan+UBSan; TSan; libFuzzer), each target fuzzed for
# SECONDS. test.sh writes the page from the results of that same run (scripts/reliability_doc.py),
# as it does in CI, so the page always describes one real run of the tree.
# Usage: scripts/reliability-report.sh [FUZZ_SECONDS_PER_TARGET (default 60)]
# Needs root for the netns suite (it skips itself otherwise, and the page says so).
set -uo pipefail
cd "$(dirname "$0")/.."
FERRY_FUZZ_SECONDS=${1:-60} ./test.sh
