#!/usr/bin/env python3
"""Turn perf/compare/run.sh samples into docs/perf/transport.md and SVG plots.

The plots are drawn by Ferry's own plot writer (tools/plot): this script writes each plot as a
spec JSON next to the samples and runs `ferry-plot --spec SPEC -o SVG` (--plotter, which run.sh
points at its build), so there is one plot writer in the project and no gnuplot dependency.

Ratios are Ferry ÷ reference per pair (a pair = one Ferry run next to one reference run),
reported as the median of the pairs with the min–max spread. Only Ferry's timed pass (side
"ferry": checked the way the reference tool checks, the reference's working set) is divided by a
reference; its checked pass (side "ferry-checked", every transfer verified) is reported beside
it as a figure of its own. The "earlier" column comes from the samples of the 2026-11-22 run
(docs/perf/transport-samples-2026-11-22.csv), whose Ferry figures were checked runs.
"""
import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--root", required=True)
p.add_argument("--start", default="")
p.add_argument("--end", default="")
p.add_argument("--pairs", default="5")
p.add_argument("--sections", default="")
p.add_argument("--plotter", default="",
               help="ferry-plot binary (default: build-perfcmp's, build's, then PATH)")
a = p.parse_args()
DOC = os.path.join(a.root, "docs", "perf")
EARLIER = os.path.join(DOC, "transport-samples-2026-11-22.csv")
os.makedirs(DOC, exist_ok=True)
shutil.copy(os.path.join(a.out, "samples.csv"), os.path.join(DOC, "transport-samples.csv"))


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def load(path):
    """(section, test, size) -> side -> pair -> value; failures per (section, test, side)."""
    vals = defaultdict(lambda: defaultdict(dict))
    fails = defaultdict(lambda: defaultdict(int))
    rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
    for r in rows:
        v = num(r["value"])
        if v is None or not r["status"].startswith("ok"):
            fails[(r["section"], r["test"])][r["side"]] += 1
            continue
        vals[(r["section"], r["test"], r["size"])][r["side"]][int(r["pair"])] = v
    return vals, fails, rows


vals, fails, rows = load(os.path.join(a.out, "samples.csv"))
old, _, old_rows = load(EARLIER)


def med(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else None


def ratios(f, ref):
    return [f[k] / ref[k] for k in sorted(f) if k in ref and ref[k] > 0]


def fmt(x, d=3):
    if x is None:
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{d}g}" if x < 100 else f"{x:.0f}"


def fsize(s):
    s = int(s)
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if s >= n and s % n == 0:
            return f"{s // n} {unit}"
    return f"{s} B"


def cell(rs):
    if not rs:
        return "—"
    return f"**{fmt(med(rs))}×** ({fmt(min(rs))}–{fmt(max(rs))})"


def ratio_of(store, section, test, size, side="ferry", ref_side="ref"):
    d = store.get((section, test, str(size)), {})
    return ratios(d.get(side, {}), d.get(ref_side, {}))


goals = []  # (goal, earlier text, now text, verdict)


def ratio_table(section, tests, lat, title, ref_name, unit):
    """The comparison table of one section; returns (markdown lines, {(test, size): ratios})."""
    out = [f"### {title}", "",
           f"| test | size | earlier: Ferry (checked) ÷ ref | now: Ferry timed | {ref_name} | "
           f"**now: Ferry timed ÷ ref** (min–max) | pairs | Ferry checked pass | checked ÷ timed |",
           "|---|---|---|---|---|---|---|---|---|"]
    res = {}
    for test in tests:
        sizes = sorted({int(k[2]) for k in vals if k[0] == section and k[1] == test and
                        k[2].isdigit()})
        for s in sizes:
            d = vals[(section, test, str(s))]
            f, ref, chk = d.get("ferry", {}), d.get("ref", {}), d.get("ferry-checked", {})
            rs = ratios(f, ref)
            res[(test, s)] = rs
            earlier = ratio_of(old, section, test, s)
            cr = ratios(chk, f)
            out.append(f"| {test} | {fsize(s)} | {fmt(med(earlier)) + '×' if earlier else '—'} | "
                       f"{fmt(med(f.values()))} {unit} | {fmt(med(ref.values()))} {unit} | "
                       f"{cell(rs)} | {len(rs)} | {fmt(med(chk.values()))} {unit} | "
                       f"{fmt(med(cr)) + '×' if cr else '—'} |")
        nf = fails.get((section, test), {})
        if nf:
            out.append(f"| {test} | runs failed 3 tries | Ferry: {nf.get('ferry', 0)} | "
                       f"ref: {nf.get('ref', 0)} | | | | | |")
    out.append("")
    return out, res


def goal(text, now_sets, earlier_sets, limit, higher):
    """now_sets/earlier_sets: lists of ratio lists; the verdict uses each set's median."""
    now = [med(r) for r in now_sets if r]
    before = [med(r) for r in earlier_sets if r]
    worst = lambda xs: (min(xs) if higher else max(xs)) if xs else None
    if not now:
        goals.append((text, fmt(worst(before)), "not measured (runs failed or section skipped)",
                      "no data"))
        return
    w = worst(now)
    met = w >= limit if higher else w <= limit
    spread = f"{fmt(min(now))}–{fmt(max(now))}" if len(now) > 1 else fmt(w)
    goals.append((text, f"{fmt(worst(before))}×" if before else "—",
                  f"worst **{fmt(w)}×** (medians {spread})", "met" if met else "MISSED"))


md = ["# Ferry transport performance vs reference tools", "",
      "Generated by `perf/compare/run.sh` (do not edit by hand; rerun the script). "
      f"Run: {a.start} → {a.end} (UTC), {a.pairs} alternating pairs per point (Ferry run, "
      "reference run, Ferry run, …). Every ratio is Ferry ÷ reference computed per pair; the "
      "tables give the median over the pairs and the min–max spread. For latency lower is "
      "better (< 1 means Ferry is faster); for bandwidth, message rate and rows/s higher is "
      "better.", "",
      "**Like for like.** Each Ferry run makes two passes per size (`--check both`): a checked "
      "pass that verifies every transfer against a seeded pattern, and the timed pass, which "
      "checks the way the reference tool does (latency: arrival seen by the last byte or the "
      "completion, as ib_write_lat and ucp_put_lat poll; bandwidth: nothing checked) with the "
      "reference's working set (bandwidth: every op re-sends one buffer into one buffer, as "
      "ucp_put_bw / ib_write_bw / iperf3 do). Only the timed pass is divided by a reference "
      "(\"now: Ferry timed ÷ ref\"); the checked pass is reported beside it with its cost "
      "relative to the timed one. The \"earlier\" column is the 2026-11-22 run, whose Ferry "
      "figures came from checked runs with 32 rotating buffers, so it compared a checked run "
      "with an unchecked one; it is kept only to show where the work started.", ""]
load_file = os.path.join(a.out, "load.txt")
load_note = ""
if os.path.exists(load_file):
    load_note = " Load average (1/5/15 min) at " + "; at ".join(
        ln.strip() for ln in open(load_file) if ln.strip()) + "."
md += ["**Caveat: 2 cores, and every figure on this machine is noisy.** Each measurement is "
       "kept short, so absolute numbers swing between runs; the alternation makes the ratios "
       "fairer and the spreads show how noisy they were." + load_note + " Only the ratios mean "
       "anything; the machine description is below.", "",
       "Why each missed goal is missed — profiles of both sides, and what would fix it — is in "
       "[transport-analysis.md](transport-analysis.md) (written by hand from the profiles; it "
       "names the run it analysed).", ""]


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception as e:  # noqa: BLE001 — best effort description
        return f"({e})"


md += ["## Machine", "", "```", sh("uname -a"),
       sh("lscpu | grep -E '^(Model name|CPU\\(s\\)|Thread|Core|Socket|L1d|L2|L3|NUMA node\\(s\\))'"),
       sh("free -h"), sh("ucx_info -v 2>/dev/null | head -2"),
       sh("iperf3 --version 2>&1 | head -1"), sh("sockperf --version 2>&1 | grep -m1 -i version"),
       "```", "", "## Results", ""]

res_all = {}
lat_plot, bw_plot = [], []
for section, tls in (("ucx-shm", "UCX_TLS=shm,self"),
                     ("ucx-tcp", "UCX_TLS=tcp,self, UCX_NET_DEVICES=lo")):
    if not any(k[0] == section for k in vals) and not any(k[0] == section for k in fails):
        continue
    t1, r1 = ratio_table(section, ["tag_lat", "ucp_put_lat"], True,
                         f"UCX {section[4:]} ({tls}) — latency (half round trip; Ferry "
                         "t_typical vs ucx_perftest 50th percentile)", "ucx_perftest", "µs")
    t2, r2 = ratio_table(section, ["ucp_put_bw"], False,
                         f"UCX {section[4:]} ({tls}) — bandwidth (ferry-bw --op write vs "
                         "ucp_put_bw, overall)", "ucx_perftest", "MiB/s")
    t3, r3 = ratio_table(section, ["ucp_put_rate"], False,
                         f"UCX {section[4:]} ({tls}) — message rate (ferry-bw --op write vs "
                         "ucp_put_bw, overall)", "ucx_perftest", "Mpps")
    md += t1 + t2 + t3
    res_all[section] = {**r1, **r2, **r3}
    lat_plot += [(f"{section} tag", section, "tag_lat"), (f"{section} put", section, "ucp_put_lat")]
    bw_plot += [(f"{section} put", section, "ucp_put_bw")]

if any(k[0] == "tcp" for k in vals) or any(k[0] == "tcp" for k in fails):
    t1, r1 = ratio_table("tcp", ["pingpong"], True,
                         "TCP — ping-pong latency (ferry-lat --op send vs sockperf pp; "
                         "sockperf's minimum message is 14 B, so both use 14 B)", "sockperf", "µs")
    t2, r2 = ratio_table("tcp", ["stream"], False,
                         "TCP — single-stream bandwidth (ferry-bw --op send vs iperf3 -l SIZE)",
                         "iperf3", "MiB/s")
    md += t1 + t2
    res_all["tcp"] = {**r1, **r2}
    lat_plot.append(("tcp ping-pong", "tcp", "pingpong"))
    bw_plot.append(("tcp stream", "tcp", "stream"))

if any(k[0] == "verbs" for k in vals):
    t1, r1 = ratio_table("verbs", ["ib_write_lat", "ib_send_lat", "ib_read_lat"], True,
                         "verbs (soft-RoCE rxe0 inside the ferry-vm VM, one boot; the guest CPU "
                         "may be emulated (TCG), so only the ratios mean anything) — latency vs "
                         "perftest (t_typical both; read is a full round trip on both sides)",
                         "perftest", "µs")
    t2, r2 = ratio_table("verbs", ["ib_write_bw", "ib_read_bw"], False,
                         "verbs (soft-RoCE rxe0 in the VM) — bandwidth vs perftest", "perftest",
                         "MiB/s")
    md += t1 + t2
    res_all["verbs"] = {**r1, **r2}

# ---- sparse
SPARSE_BACKENDS = ("tcp", "ucx-shm", "ucx-tcp", "verbs")
sparse_res = {}  # (backend, op, rs, rows) -> {"pack": ratios, "gather": ratios}
# The memcpy gather per (section, rows, row size, pair): "sparse" on the host, "sparse-verbs"
# inside the VM (the verbs cells are divided by the guest's own gather).
gather = {}
for r in rows:
    if r["section"] in ("sparse", "sparse-verbs") and r["test"] == "gather" and num(r["value"]):
        gather[(r["section"], int(r["rows"]), int(r["row_size"]), int(r["pair"]))] = float(r["value"])
old_gather = {}
for r in old_rows:
    if r["section"] == "sparse" and r["test"] == "gather" and num(r["value"]):
        old_gather[(int(r["rows"]), int(r["row_size"]), int(r["pair"]))] = float(r["value"])


def earlier_sparse(be, rs, nrows):
    """The 2026-11-22 run's ratio: checked sparse write ÷ the pack-then-send formula."""
    sec = f"sparse-{be}"
    size = str(nrows * rs)
    sp = old.get((sec, f"sparse_write:{nrows}:{rs}", size), {}).get("ferry", {})
    pk = old.get((sec, f"packsend:{nrows}:{rs}", size), {}).get("ferry", {})
    eff = {}
    for pr, bw in pk.items():
        g = old_gather.get((nrows, rs, pr))
        if g and bw > 0:
            eff[pr] = nrows / (nrows * rs / (bw * 1048576.0) + nrows / g)
    return ratios(sp, eff)


if any(k[0].startswith("sparse") for k in vals) or any(k[0].startswith("sparse") for k in fails):
    md += ["### Sparse rows vs pack-then-send (rows at random row-aligned places of a 64 MiB "
           "region)", "",
           "Method. Every figure is a measured run, timed pass (nothing checked, as the "
           "references check nothing). *sparse_write / sparse_read*: `ferry-bw --op sparse_write"
           "|sparse_read --rows R --row-size S -t 4 -D …` (one segment list per op: contiguous on "
           "the initiator, scattered on the target). *pack_write* (the pack-then-send reference of "
           "sparse_write): the initiator gathers the same number of rows from random places of its "
           "own 64 MiB region into a contiguous buffer (a memcpy per row) and writes that buffer "
           "(one contiguous write) — the target does not unpack, so the reference is the cheaper "
           "half of a real pack/unpack. *pack_read* (of sparse_read): the initiator sends a "
           "16-byte request, the target gathers the rows into a buffer and sends it back "
           "(two-sided; a pull served by packing). *memcpy gather*: `perf/compare/gather` "
           "(gather.cc, g++ -O2), one thread copying the same number of rows from random places "
           "of a 64 MiB buffer into a contiguous one, walking a permutation of its rows like "
           "ferry-bw does — the in-process packing limit (for verbs, measured inside the same VM "
           "boot: the guest's CPU is emulated). Ratios are per pair, median "
           "(min–max). *Checked*: the same sparse op's checked pass (every row verified where it "
           "landed), for scale only. *Earlier*: the 2026-11-22 run's checked sparse write ÷ a "
           "pack-then-send *formula* (gather time + contiguous write time).", "",
           "| backend | op | row | rows/op | Ferry rows/s | pack-then-send rows/s | "
           "**÷ pack-then-send** | memcpy gather rows/s | **÷ gather** | earlier ÷ pack (formula) "
           "| checked rows/s | pairs |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for be in SPARSE_BACKENDS:
        sec = f"sparse-{be}"
        if not any(k[0] == sec for k in vals):
            continue
        for op, pack in (("sparse_write", "pack_write"), ("sparse_read", "pack_read")):
            for rs in (64, 256):
                for nrows in (1000, 10000, 100000):
                    size = str(nrows * rs)
                    sp = vals.get((sec, f"{op}:{nrows}:{rs}", size), {})
                    pk = vals.get((sec, f"{pack}:{nrows}:{rs}", size), {}).get("ferry", {})
                    f = sp.get("ferry", {})
                    gsec = "sparse-verbs" if be == "verbs" else "sparse"
                    gp = {pr: gather[(gsec, nrows, rs, pr)] for pr in range(1, 100)
                          if (gsec, nrows, rs, pr) in gather}
                    r_p, r_g = ratios(f, pk), ratios(f, gp)
                    sparse_res[(be, op, rs, nrows)] = {"pack": r_p, "gather": r_g}
                    earlier = earlier_sparse(be, rs, nrows) if op == "sparse_write" else []
                    nf = fails.get((sec, f"{op}:{nrows}:{rs}"), {}).get("ferry", 0)
                    md.append(
                        f"| {be} | {op} | {rs} B | {nrows:,} | {fmt(med(f.values()))}"
                        f"{' (' + str(nf) + ' failed)' if nf else ''} | {fmt(med(pk.values()))} | "
                        f"{cell(r_p)} | {fmt(med(gp.values()))} | {cell(r_g)} | "
                        f"{fmt(med(earlier)) + '×' if earlier else '—'} | "
                        f"{fmt(med(sp.get('ferry-checked', {}).values()))} | {len(r_p)} |")
    md.append("")

# ---- goals (the table)
for sec in ("ucx-shm", "ucx-tcp"):
    r = res_all.get(sec, {})
    goal(f"{sec}: 8 B and 4 KiB latency (tag, put) ≤ 1.15× ucx_perftest",
         [r.get((t, s), []) for t in ("tag_lat", "ucp_put_lat") for s in (8, 4096)],
         [ratio_of(old, sec, t, s) for t in ("tag_lat", "ucp_put_lat") for s in (8, 4096)],
         1.15, False)
r = res_all.get("ucx-shm", {})
goal("ucx-shm: message rate, 8 B writes ≥ 0.5× ucp_put_bw's", [r.get(("ucp_put_rate", 8), [])],
     [], 0.5, True)
goal("ucx-shm: bandwidth ≥ 64 KiB, same working set ≥ 0.95× ucp_put_bw",
     [r.get(("ucp_put_bw", s), []) for s in (65536, 1048576)],
     [ratio_of(old, "ucx-shm", "ucp_put_bw", s) for s in (65536, 1048576)], 0.95, True)
r = res_all.get("verbs", {})
goal("verbs (rxe in the VM): latency 8 B / 4 KiB ≤ 1.2× ib_write_lat, ib_send_lat, ib_read_lat",
     [r.get((t, s), []) for t in ("ib_write_lat", "ib_send_lat", "ib_read_lat") for s in (8, 4096)],
     [ratio_of(old, "verbs", t, s) for t in ("ib_write_lat", "ib_send_lat", "ib_read_lat")
      for s in (8, 4096)], 1.2, False)
goal("verbs (rxe in the VM): bandwidth ≥ 0.95× ib_write_bw (64 KiB, 1 MiB)",
     [r.get(("ib_write_bw", s), []) for s in (65536, 1048576)],
     [ratio_of(old, "verbs", "ib_write_bw", s) for s in (65536, 1048576)], 0.95, True)
r = res_all.get("tcp", {})
goal("tcp: stream 64 KiB and 1 MiB ≥ 0.9× iperf3 (one stream)",
     [r.get(("stream", s), []) for s in (65536, 1048576)],
     [ratio_of(old, "tcp", "stream", s) for s in (65536, 1048576)], 0.9, True)
for be in SPARSE_BACKENDS:
    cells = [v for k, v in sparse_res.items() if k[0] == be]
    if not cells:
        continue
    earlier = [earlier_sparse(be, rs, n) for rs in (64, 256) for n in (1000, 10000, 100000)]
    goal(f"sparse 64 B / 256 B rows, 1k–100k per op, {be}: ≥ 1.0× measured pack-then-send "
         "(writes and reads)", [c["pack"] for c in cells], earlier, 1.0, True)
    goal(f"sparse, {be}: ≥ 0.5× in-process memcpy gather", [c["gather"] for c in cells], [],
         0.5, True)

md += ["## Goals (reported, not asserted)", "",
       "Each goal takes the worst median over its cells (sizes, ops, row counts).", "",
       "| goal | earlier (2026-11-22, checked vs unchecked) | now (timed vs reference) | verdict |",
       "|---|---|---|---|"]
for text, before, now, verdict in goals:
    md.append(f"| {text} | {before} | {now} | {verdict} |")
md.append("")

fl = os.path.join(a.out, "failures.csv")
if os.path.exists(fl) and os.path.getsize(fl):
    lines = open(fl).read().strip().splitlines()
    md += ["## Failed attempts", "",
           f"{len(lines)} failed attempts (each Ferry run is retried up to 3 times; a run failing "
           "all 3 is recorded as failed and left out of the ratios). First messages:", "", "```"]
    seen = set()
    for ln in lines:
        key = ln.split(",", 2)[-1][:120]
        if key in seen:
            continue
        seen.add(key)
        md.append(ln[:240])
        if len(seen) >= 12:
            break
    md += ["```", ""]


def find_plotter():
    for cand in (a.plotter, os.path.join(a.root, "build-perfcmp", "tools", "plot", "ferry-plot"),
                 os.path.join(a.root, "build", "tools", "plot", "ferry-plot")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return shutil.which("ferry-plot")


plots = []
plotter = find_plotter()
if not plotter:
    print("report.py: no ferry-plot binary (build tools/plot/ferry-plot or pass --plotter); "
          "plots left out", file=sys.stderr)
else:
    def plot(name, series, title, ylabel, logy):
        spec_series = []
        for i, (label, sec, test) in enumerate(series):
            for side, nm in (("ferry", "Ferry (timed)"), ("ref", "reference")):
                pts = sorted((int(size), med(d[side].values()))
                             for (s2, t2, size), d in vals.items()
                             if s2 == sec and t2 == test and size.isdigit() and d.get(side))
                if pts:
                    # A pair shares its colour; the reference is the dashed one.
                    spec_series.append({"name": f"{nm} {label}", "points": pts,
                                        "dashed": side == "ref", "color": i})
        if not spec_series:
            return
        spec = {"title": title, "xlabel": "message size (bytes)", "ylabel": ylabel,
                "log_x": True, "log_y": logy, "x_unit_format": "bytes",
                "width": 900, "height": 540, "series": spec_series}
        spec_path = os.path.join(a.out, f"plot-{name}.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        svg = os.path.join(DOC, f"transport-{name}.svg")
        r = subprocess.run([plotter, "--spec", spec_path, "-o", svg], capture_output=True,
                           text=True)
        if r.returncode != 0:
            print(f"report.py: {plotter} --spec {spec_path} failed: {r.stderr.strip()}",
                  file=sys.stderr)
            return
        plots.append(f"transport-{name}.svg")

    plot("latency", lat_plot, "Ferry (timed pass) vs reference tools: latency",
         "latency, median (µs; Ferry solid, reference dashed)", True)
    plot("bandwidth", bw_plot, "Ferry (timed pass) vs reference tools: bandwidth",
         "bandwidth, median (MiB/s; Ferry solid, reference dashed)", False)
if plots:
    md += ["## Plots", ""] + [f"![{p_}]({p_})" for p_ in plots] + [""]

cmds_path = os.path.join(a.out, "commands.txt")
cmds = open(cmds_path).read().strip() if os.path.exists(cmds_path) else ""
md += ["## Exact commands", "",
       "Reproduce: `perf/compare/run.sh [--pairs N] [--with-vm]` (installs iperf3, sockperf, "
       "ucx-utils if missing; builds build-perfcmp, whose `ferry-plot --spec` draws the plots). "
       "PORT is a fresh port per run; Ferry's runs add `-p PORT --csv FILE`. Ferry's MB/s are MiB/s "
       "(2^20), as are ucx_perftest's; iperf3's bits/s are converted to MiB/s. Raw samples: "
       "[transport-samples.csv](transport-samples.csv); the earlier run's: "
       "[transport-samples-2026-11-22.csv](transport-samples-2026-11-22.csv).", "", "```", cmds,
       "```", ""]

with open(os.path.join(DOC, "transport.md"), "w") as f:
    f.write("\n".join(md))
print("\n".join(md))
