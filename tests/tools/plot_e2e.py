#!/usr/bin/env python3
"""ferry-lat / ferry-bw --plot and ferry-plot end to end (meson test 'tools_plot_e2e').

Runs `ferry-bw --transport tcp --local -a --plot bw.svg --json bw.json` (and ferry-lat likewise),
reads each SVG back with xml.etree (so it must be well-formed XML in the SVG namespace) and
checks that the point markers are exactly the sweep in the JSON: one per size and series, data-x
the sizes, data-y the plotted column. Then ferry-plot over the same JSON files, a plot spec with
hostile strings, and the error paths (exit codes and messages).

usage: plot_e2e.py FERRY_LAT FERRY_BW FERRY_PLOT
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

LAT, BW, PLOT = sys.argv[1:4]
SVG = "{http://www.w3.org/2000/svg}"
TINY = ["--transport", "tcp", "--local", "--warmup", "2", "--timeout", "20"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return ok


def run(*args, want=0):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    check(p.returncode == want,
          f"{os.path.basename(args[0])} {' '.join(args[1:])}: exit {p.returncode}, want {want}\n"
          f"{p.stderr[-2000:]}")
    return p


def points(path_or_text, from_text=False):
    """Parses the SVG; returns {series: [(x, y), ...]} of the point markers, and the root."""
    root = ET.fromstring(path_or_text) if from_text else ET.parse(path_or_text).getroot()
    check(root.tag == SVG + "svg", f"root element is {root.tag}, not svg in the SVG namespace")
    series = {}
    for c in root.iter(SVG + "circle"):
        if c.get("class") == "point":
            series.setdefault(c.get("data-series"), []).append(
                (float(c.get("data-x")), float(c.get("data-y"))))
    return series, root


def sweep_matches(svg, results, columns, name):
    """Every series is the sweep of one JSON column, point for point."""
    series, root = points(svg)
    check(len(series) == len(columns), f"{name}: series {sorted(series)}, want {len(columns)}")
    want_x = [float(r["bytes"]) for r in results]
    total = sum(len(v) for v in series.values())
    check(total == len(results) * len(columns),
          f"{name}: {total} point markers, want {len(results)} sizes x {len(columns)} series")
    for label, column in columns.items():
        got = series.get(label, [])
        check([x for x, _ in got] == want_x, f"{name}/{label}: data-x {[x for x, _ in got]}, "
              f"want the sweep's sizes {want_x}")
        check([y for _, y in got] == [float(r[column]) for r in results],
              f"{name}/{label}: data-y differ from the JSON's {column}")
    return root


with tempfile.TemporaryDirectory(prefix="ferry_plot_e2e_") as d:
    f = lambda name: os.path.join(d, name)  # noqa: E731

    # ferry-bw -a: the done-when. 2 B .. 8 MiB, one series (average MiB/s).
    run(BW, *TINY, "-a", "-n", "20", "-t", "4", "--plot", f("bw.svg"), "--json", f("bw.json"))
    bw = json.load(open(f("bw.json")))
    check(len(bw["results"]) == 23, f"ferry-bw -a swept {len(bw['results'])} sizes, want 23")
    root = sweep_matches(f("bw.svg"), bw["results"], {"tcp send": "bw_avg_mb_s"}, "ferry-bw -a")
    texts = [t.text or "" for t in root.iter(SVG + "text")]
    check("ferry-bw: tcp send bandwidth" in texts, f"bw.svg title missing: {texts[:3]}")
    check("1K" in texts and "1M" in texts, "bw.svg lacks byte-size ticks 1K and 1M")
    check("tcp send" in texts, "bw.svg legend lacks the series name")

    # ferry-lat -a: median and p99, both against every size.
    run(LAT, *TINY, "-a", "-n", "20", "--plot", f("lat.svg"), "--json", f("lat.json"))
    lat = json.load(open(f("lat.json")))
    check(len(lat["results"]) == 23, f"ferry-lat -a swept {len(lat['results'])} sizes, want 23")
    sweep_matches(f("lat.svg"), lat["results"],
                  {"tcp send median": "t_typical_usec", "tcp send p99": "p99_usec"}, "ferry-lat -a")

    # --plot - : the SVG on stdout, the table moved to stderr.
    p = run(LAT, *TINY, "-s", "8,4K", "-n", "5", "--plot", "-")
    if p.returncode == 0:
        series, _ = points(p.stdout, from_text=True)
        check(sum(len(v) for v in series.values()) == 4, "ferry-lat --plot -: want 4 markers")
        check("#bytes" in p.stderr, "ferry-lat --plot -: the text table should go to stderr")

    # ferry-plot draws the same JSON the same way.
    run(PLOT, "-o", f("bw2.svg"), f("bw.json"))
    check(points(f("bw2.svg"))[0] == points(f("bw.svg"))[0],
          "ferry-plot bw.json differs from ferry-bw --plot")
    run(PLOT, "--metric", "rate", "-o", f("rate.svg"), f("bw.json"))
    sweep_matches(f("rate.svg"), bw["results"], {"tcp send": "msg_rate_mpps"}, "--metric rate")
    run(PLOT, "-o", f("two.svg"), f("lat.json"), f("lat.json"), "--label", "a",
        "--label", "b & <c>", "--title", "two \"runs\"")
    series, root = points(f("two.svg"))
    check(sorted(series) == ["a median", "a p99", "b & <c> median", "b & <c> p99"],
          f"labelled series: {sorted(series)}")
    check(root.find(SVG + "title").text == "two \"runs\"", "--title not used")

    # A spec with hostile strings: the parsed text must equal what was asked for.
    spec = {"title": "A & B <c> \"d\" 'e' µs", "xlabel": "x <", "ylabel": "y >", "log_x": True,
            "x_unit_format": "bytes",
            "series": [{"name": "Ferry & co", "points": [[8, 1], [1024, 2.5], [65536, 4]]},
                       {"name": "</text>", "points": [[8, 2], [65536, 3]], "dashed": True}]}
    json.dump(spec, open(f("spec.json"), "w"))
    run(PLOT, "--spec", f("spec.json"), "-o", f("spec.svg"))
    series, root = points(f("spec.svg"))
    check(root.find(SVG + "title").text == spec["title"], "spec title not preserved")
    check(series == {"Ferry & co": [(8, 1), (1024, 2.5), (65536, 4)],
                     "</text>": [(8, 2), (65536, 3)]}, f"spec points: {series}")

    # Errors: exit codes and messages that name the problem.
    spec["log_y"] = True
    spec["series"][1]["points"][0][1] = 0
    json.dump(spec, open(f("bad.json"), "w"))
    p = run(PLOT, "--spec", f("bad.json"), "-o", f("bad.svg"), want=1)
    check("series '</text>'" in p.stderr and "log y" in p.stderr, f"log-axis error: {p.stderr}")
    check(not os.path.exists(f("bad.svg")), "a refused spec must not leave a file")
    p = run(PLOT, "-o", f("mix.svg"), f("lat.json"), f("bw.json"), want=1)
    check("plot them separately" in p.stderr, f"mixed runs: {p.stderr}")
    p = run(PLOT, "-o", "/nonexistent-dir/x.svg", f("bw.json"), want=1)
    check("/nonexistent-dir/x.svg" in p.stderr, f"unwritable output: {p.stderr}")
    p = run(PLOT, "-o", f("x.svg"), want=2)
    check("either --spec" in p.stderr, f"no input: {p.stderr}")
    p = run(BW, "--transport", "tcp", "--plot", f("server.svg"), want=2)
    check("client" in p.stderr, f"server-side --plot: {p.stderr}")
    p = run(BW, *TINY, "-s", "64", "-n", "5", "--plot", "/nonexistent-dir/x.svg", want=1)
    check("--plot" in p.stderr and "/nonexistent-dir/x.svg" in p.stderr,
          f"ferry-bw unwritable plot: {p.stderr}")

if failures:
    print(f"0 passed, {len(failures)} failed", file=sys.stderr)
    sys.exit(1)
print("plot end to end: all checks passed")
