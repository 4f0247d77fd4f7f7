#!/usr/bin/env python3
"""Writes docs/reliability.md from what one run of ./test.sh (or scripts/reliability-report.sh)
recorded in its results folder (FERRY_RESULTS_DIR, scripts/test-stages.sh):

  meta.txt                 key=value: command, started, commit, tree, fuzz_seconds
  reliability-lines.txt    RELIABILITY lines (tests/common/reliability.h) of the main stage
  main-testlog.json        meson's per-test results of the main stage (JSON lines)
  asan-testlog.json        the same for the ASan+UBSan stage
  asan-summary.txt         its meson summary, gtest pass count and sanitizer report count
  tsan.txt                 the TSan stage's lines ("tsan BINARY: ok, N tests passed")
  fuzz.txt                 tests/fuzz/run.sh's result lines
  stages.txt               "name status seconds" per stage that ran

Skips are counted apart from passes: a meson SKIP (exit 77: tests/common/skips.h makes a gtest
binary whose every case skipped exit 77) and the gtest cases skipped inside a test meson counts
as OK (gtest's "[  SKIPPED ]" lists, scripts/gtest_skips.py).

A missing file leaves its section saying it did not run: the page reports what happened in that
run, never older results. Usage: reliability_doc.py RESULTS_DIR OUT.md
"""
import os
import platform
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtest_skips  # noqa: E402

results, out_path = sys.argv[1], sys.argv[2]


def read(name):
    path = os.path.join(results, name)
    return open(path, encoding="utf-8", errors="replace").read() if os.path.exists(path) else None


def testlog(name):
    return gtest_skips.load(os.path.join(results, name))


meta = {}
for line in (read("meta.txt") or "").splitlines():
    if "=" in line:
        k, v = line.split("=", 1)
        meta[k.strip()] = v.strip()
stages = {}
for line in (read("stages.txt") or "").splitlines():
    parts = line.split()
    if len(parts) >= 3:
        stages[parts[0]] = (parts[1], parts[2])

# ---- RELIABILITY lines ------------------------------------------------------------------------
VIOLATIONS = {"hang", "late", "corrupt", "unclear-error", "unclear", "undetected", "crash", "setup",
              "violation", "wrong", "wrong-model", "job-failed", "not-killed"}


def parse_line(line):
    body = line[len("RELIABILITY "):]
    err = ""
    i = body.find(" error=")
    if i >= 0:
        err, body = body[i + 7:], body[:i]
    f = {}
    for kv in body.split():
        if "=" in kv:
            k, v = kv.split("=", 1)
            f[k] = v
    f["error"] = err.replace("|", "/")
    return f


# The lines file holds what host-side tests appended; cases that ran inside the soft-RoCE VM could
# not write to it (the guest sees the host read-only), but every test's output is in meson's log:
# take the lines from both, once each, in order.
_seen = set()
_lines = []
for _l in (read("reliability-lines.txt") or "").splitlines():
    if _l.startswith("RELIABILITY ") and _l not in _seen:
        _seen.add(_l)
        _lines.append(_l)
for _t in testlog("main-testlog.json") or []:
    for _l in (_t.get("stdout") or "").splitlines():
        _l = _l.strip()
        if _l.startswith("RELIABILITY ") and _l not in _seen:
            _seen.add(_l)
            _lines.append(_l)
rows = [parse_line(l) for l in _lines]


def family(s):
    name = s.get("scenario", "")
    # Rank 0 (the coordinator) killed with --replicas 2: the launcher cases kill rank 0 too.
    if (name.startswith("train-replicas") and
            ("-rank0" in name or name.endswith("-mpirun") or name.endswith("-srun") or
             name.endswith("-ferry-launch"))):
        return "coordinator"
    if name.startswith("ps-") and name.endswith("-standby"):
        return "coordinator"
    if name.startswith("train-replicas"):
        return "replicas"
    if name.startswith("train-straggler"):
        return "stragglers"
    if name.startswith("train-"):
        return "train"
    if name.startswith("ps-"):
        return "ps"
    if name == "sigkill":
        return "kill"
    return "net"


def cell(v):
    v = (v or "-").replace("|", "/")
    return v.replace(",", ", ").replace(";", "; ")


# ---- tests ------------------------------------------------------------------------------------
main = testlog("main-testlog.json")
asan = testlog("asan-testlog.json")


suites_of = gtest_skips.suites


def result_rows(tests, want):
    out = []
    for t in tests or []:
        name = t["name"].split(" / ")[-1]
        if want(t, name):
            skipped = len(gtest_skips.skipped_cases(t))
            out.append(f"| {name} | {t['result']} | {t['duration']:.1f} | {skipped or '-'} |")
    return out


def skip_summary(tests):
    """'N tests: a OK, b SKIP, c failed; k gtest cases skipped inside m tests'."""
    counts = {}
    for t in tests:
        counts[t["result"]] = counts.get(t["result"], 0) + 1
    inside = [len(gtest_skips.skipped_cases(t)) for t in tests if t["result"] != "SKIP"]
    failed = sum(n for r, n in counts.items() if r not in ("OK", "SKIP"))
    return (f"{len(tests)} tests: {counts.get('OK', 0)} OK, {counts.get('SKIP', 0)} SKIP, "
            f"{failed} failed; {sum(inside)} gtest cases skipped inside "
            f"{sum(1 for n in inside if n)} of the others")


def skip_rows(stage, tests):
    out = []
    for t in tests or []:
        cases = gtest_skips.skipped_cases(t)
        if t["result"] == "SKIP" or cases:
            what = ", ".join(cases)
            if t["result"] == "SKIP":
                what = "the whole test (exit 77)" + (": " + what if what else "")
            out.append(f"| {stage} | {t['name'].split(' / ')[-1]} | {t['result']} | "
                       f"{len(cases) or '-'} | {what.replace('|', '/')} |")
    return out


out = []
w = out.append
w("# Reliability report\n")
w(f"Generated from the results of `{meta.get('command', './test.sh')}` started "
  f"{meta.get('started', '?')}; commit `{meta.get('commit', '?')}` {meta.get('tree', '')}, kernel "
  f"{platform.release()}, {os.cpu_count()} cores. CI writes this page from its own run "
  "(test.sh's last step), so it never describes an older build; do not edit it by hand.\n")
w("The rule every fault case checks: each transfer or job either completes with the right bytes "
  "(pattern-checked, or the model file compared byte for byte), or fails with a clear error "
  "naming what failed within the bound (`peer_timeout` plus slack). Never a hang (each case has "
  "a hard deadline), never corrupted or lost data.\n")

w("## Summary\n")
w("| What | Outcome |")
w("|---|---|")
for name in ("main", "asan", "tsan", "fuzz"):
    if name in stages:
        st, secs = stages[name]
        w(f"| stage `{name}` | {st} in {secs} s |")
    else:
        w(f"| stage `{name}` | did not run in this invocation |")
bad = [r for r in rows if r.get("outcome") in VIOLATIONS]
w(f"| fault scenarios (RELIABILITY lines) | {len(rows)} results, {len(bad)} violating the rule |")
if main is not None:
    rel = [t for t in main if suites_of(t) & {"reliability", "netns", "fuzz"}]
    failed = [t for t in rel if t["result"] not in ("OK", "SKIP")]
    w(f"| reliability, netns and fuzz-replay tests (main stage) | {len(rel)} run, "
      f"{len(failed)} failed, {sum(1 for t in rel if t['result'] == 'SKIP')} skipped |")
    w(f"| meson tests of the main stage | {skip_summary(main)} |")
if asan is not None:
    w(f"| meson tests of the asan stage | {skip_summary(asan)} |")
asan_summary = read("asan-summary.txt")
if asan_summary:
    w(f"| ASan+UBSan | {asan_summary.strip()} |")
w("")

sections = [
    ("replicas", "Replicated shards: a server killed while training (ferry-train --replicas 2)",
     "3 servers, 2 workers, bsp, fixed seeds; one server-only rank SIGKILLed at a random moment "
     "while the job trains. `ok` = the job finished without a restart and its model file equals "
     "the run without replicas and without the kill, byte for byte. `stall_ms`: the longest gap "
     "between two streaming evaluations beyond the run's median gap (what the failover cost). "
     "In-process cases (a server whose connections all close: head, tail, middle of a chain; "
     "both replicas lost) are in tests/ps/replica_test.cc, listed under the tests below."),
    ("coordinator", "The coordinator's rank killed: the standby takes over (--replicas 2)",
     "Rank 0 runs the coordinator and server 0; with replicas rank 1 runs a standby coordinator "
     "(ps/coordinator/coordinator.h). `train-replicas-kill-*-rank0`, `-ferry-launch`, `-mpirun`, "
     "`-srun`: the ferry-train job above with rank 0 SIGKILLed at a random moment while it trains, "
     "under ferry-train's launcher, ferry-launch, mpirun --enable-recovery and "
     "srun --kill-on-bad-exit=0: `ok` = the "
     "job finished and its model file equals the run without replicas and without the kill, byte "
     "for byte; `stall_ms` as above. `ps-coordinator-*-standby` (tests/ps/failure_test.cc): rank 0 "
     "SIGKILLed (SIGSTOPped) 1 s into a 3 s (4 s) job of 2 servers and 2 workers: `completed` = every "
     "other rank ended ok; `takeover_ms`: the first member's rejoin to the takeover (a stopped "
     "rank 0 is noticed after peer_timeout, 2 s, first)."),
    ("stragglers", "A straggler under bsp, with and without backup workers (ferry-train --backup-workers)",
     "3 workers, 2 servers, bsp, fixed seeds; worker 1 slowed 5x by a real sleep in its loop "
     "(tests/train/backup_workers_test.cc). Without backup workers every clock waits for it: `ok` = "
     "the model file equals the run without the straggler, byte for byte; `wall` is the job's wall "
     "time over that run's (the stall the straggler costs). With `--backup-workers 1` its clocks "
     "complete without it: `ok` = the wall time it adds to the run without a straggler is at most a third "
     "of what the straggler adds without backup workers; the note has the test logloss and its cost, "
     "and the clocks completed without the straggler."),
    ("train", "Training under network faults (tests/netns/train-faults.sh)",
     "ferry-train over tcp, servers in one network namespace and workers in another. Loss and "
     "rate limits must end with the fault-free model bytes; a black hole or a link down must end "
     "every rank with an error naming the lost peer within the bound. `detect_ms`: fault to the "
     "last rank's exit."),
    ("ps", "Parameter-server members killed or stopped (tests/ps/failure_test.cc)",
     "One process per rank; a member is SIGKILLed or SIGSTOPped mid-job. Every survivor must fail "
     "naming it within peer_timeout (2 s here) plus slack. `detect_ms`: the worst survivor's exit."),
    ("net", "Transfers under network faults (tests/netns)",
     "`loss1`/`loss10`: nftables drops 1 % / 10 % of the packets; `blackhole`: everything dropped "
     "mid-transfer; `rate10mbit`: tbf at 10 Mbit/s; `linkdown`: the link set down mid-transfer; "
     "`proxy-*`: through a user-space relay that delays, re-segments, stalls or resets. "
     "`detect_ms`: fault to first error; `drain_ms`: fault to the last affected op's completion."),
    ("kill", "Peer killed with SIGKILL mid-transfer (tests/netns)",
     "A fresh peer writes while the survivor reads; the peer is SIGKILLed after a seeded random "
     "delay. Worst `detect_ms`/`drain_ms` over all kills."),
]
for fam, title, text in sections:
    fr = [r for r in rows if family(r) == fam]
    w(f"## {title}\n")
    w(text + "\n")
    w("| Scenario | Backend | Outcome | detect_ms | drain_ms | elapsed_ms | Note | Error |")
    w("|---|---|---|---|---|---|---|---|")
    if not fr:
        w("| (no results in this run) | | | | | | | |")
    for r in fr:
        w(f"| {r.get('scenario', '?')} | {r.get('backend', '?')} | {r.get('outcome', '?')} | "
          f"{r.get('detect_ms', '-')} | {r.get('drain_ms', '-')} | {r.get('elapsed_ms', '-')} | "
          f"{cell(r.get('note'))} | {cell(r.get('error'))[:160]} |")
    w("")

w("## Reliability tests of the main stage\n")
w("meson suites `reliability` (fault injection on every backend, replicas, PS failure detection), "
  "`netns` (network namespaces; skipped without root) and `fuzz` (every saved fuzz input "
  "replayed by the normal build), the training kill/resume/replica tests, and `ps_vm` (the PS, "
  "its failure detection, fault injection, replicas and ferry-train over verbs in the "
  "soft-RoCE VM).\n")
w("| Test | Result | Seconds | Skipped gtest cases |")
w("|---|---|---|---|")
rr = result_rows(main, lambda t, n: bool(suites_of(t) & {"reliability", "netns", "fuzz"}) or
                 n.startswith("train_re") or n == "ps_vm")
w("\n".join(rr) if rr else "| (the main stage did not run) | | | |")
w("")

w("## Skips\n")
w("Every test meson reported as SKIP (its binary or script exited 77: nothing ran) and every "
  "test with gtest cases skipped inside it (GTEST_SKIP: a missing launcher, device or "
  "capability; meson counts such a test as OK). A plain `./test.sh` fails its main stage when a "
  "test CI must run skips (scripts/check-must-run.py).\n")
w("| Stage | Test | Result | Skipped gtest cases | Skipped |")
w("|---|---|---|---|---|")
sk = skip_rows("main", main) + skip_rows("asan", asan)
if main is None and asan is None:
    w("| (neither the main nor the asan stage ran) | | | | |")
else:
    w("\n".join(sk) if sk else "| (nothing skipped) | | | | |")
w("")

w("## Fuzz targets (tests/fuzz/run.sh)\n")
fz = []
for line in (read("fuzz.txt") or "").splitlines():
    m = re.match(r"fuzz ([^:]+): ([A-Za-z]+), ([0-9?]+) executions in ([0-9]+)s, corpus ([0-9]+)",
                 line)
    if m:
        fz.append(f"| {m[1]} | {m[3]} | {m[4]} | {m[5]} | {m[2]} |")
w("| Target | Executions | Seconds | Corpus after run | Outcome |")
w("|---|---|---|---|---|")
w("\n".join(fz) if fz else "| (the fuzz stage did not run) | | | | |")
w("")

w("## Sanitizers\n")
w("ASan+UBSan build (UBSan without alignment and vptr; the fuzz stage keeps both), every suite but "
  "`rdma` and `install` (any report aborts its test):\n")
w("| Test | Result | Seconds | Skipped gtest cases |")
w("|---|---|---|---|")
ar = result_rows(asan, lambda t, n: True)
w("\n".join(ar) if ar else "| (the asan stage did not run) | | | |")
w("")
w("TSan build, the multi-threaded tests (gtest filters in scripts/test-stages.sh):\n")
w("| Binary | Outcome |")
w("|---|---|")
ts = []
for line in (read("tsan.txt") or "").splitlines():
    m = re.match(r"tsan ([^:]+): (.*)$", line)
    if m:
        ts.append(f"| {m[1]} | {m[2]} |")
w("\n".join(ts) if ts else "| (the tsan stage did not run) | |")
w("")

w("## Outcomes\n")
w("- `ok`, `completed`: finished with the right bytes. `failed-in-bound`: failed with a clear "
  "error no later than the bound.")
w("- Violations: `hang`, `late`, `unclear-error`/`unclear`, `corrupt`, `undetected` (a fault went "
  "unreported), `crash`, `setup`, `wrong`/`wrong-model` (different bytes), `job-failed` (a "
  "replicated job did not survive), `not-killed` (the job ended before the fault).")
open(out_path, "w").write("\n".join(out) + "\n")
print(out_path)
sys.exit(1 if bad else 0)
