#!/usr/bin/env python3
"""perf/train/sweep.py — the sweep behind ferry-train's default hyper-parameters.

Tunes for the family, not for one file: many data sets from ferry-gen (CTR-like rows with one
value per field and lr / fm / ffm / mlp truths, Criteo's layout, text-like bags of words with
hundreds to thousands of features per row; 10^3 to 10^7 samples; several vocabularies and
skews), each model trained on every set it applies to with no hyper-parameter flag, and with a
grid of its hyper-parameters on the smaller sets; the references run on the same files:

  LIBLINEAR  liblinear-train -s 0 -B 1 at the best C of its own cross-validation (-C; on the
             10M-sample set the 1M set's C, as the search would take hours), and at C = 1;
             logloss and AUC from liblinear-predict -b 1 (libffm files are converted to
             libsvm, index = the libffm index + 1).
  libFM      libFM -task c -method mcmc -dim 1,1,8 -init_stdev 0.1 (MCMC needs no learning
             rate), when --libfm names a libFM binary the user built (the sweep never builds
             or vendors it: e.g. build srendle/libfm's `make all` in a scratch directory);
             --libfm-iter iterations (fewer on sets of over 600k samples).

Phases (--phase, comma-separated, in order; results accumulate in OUT/results.jsonl and every
run is made once, so an interrupted sweep goes on where it stopped):
  defaults   every model on every set, no hyper-parameter flag
  refs       the references above
  tune       every model x every tune set x its grid (per unit of feature value: the script
             multiplies steps by the data's 1 / rms(value) exactly as ferry-train does)
  firstpass  the MLP and DeepFM with --epochs 1 (the automatic passes must not end worse)
  report     writes --doc (default OUT/training-sweep.md; docs/perf/training-sweep.md is the
             committed one)
  Exploratory (not in the default list): batch (alternative batch-size rules U/bmin: batch =
  N / U within [bmin, 256]) and refit (the default run's kept pass count trained again on every
  line: what the held-out fraction costs).

Usage: perf/train/sweep.py [--build DIR] [--no-build] [--out DIR] [--phase P,...]
                           [--sets tune|small|nohuge|all|NAME,...] [--models lr,ftrl,...]
                           [--libfm PATH] [--libfm-iter N] [--doc FILE]
--build is a release build of its own (default build-sweep, set up and brought up to date
first), so that nothing rebuilds the binaries while the sweep runs. Quality figures do not need
an idle machine; the wall times in the table do.
"""
import argparse
import hashlib
import itertools
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from metrics import metrics_of  # noqa: E402  (perf/train/metrics.py)

# ---------------------------------------------------------------- data sets
# name -> (family, ferry-gen args, models that apply). Test sets are 20k samples (5k for the
# smallest), independent of the training stream.
CTR = ["lr", "ftrl", "fm", "ffm", "mlp", "deepfm"]
LINEAR = ["lr", "ftrl"]
TEXT = ["lr", "ftrl", "fm"]


def ctr(truth, samples, fields=26, vocab=1000, zipf=1.1, seed=1, fmt="libffm", extra=()):
    args = ["--truth", truth, "--samples", str(samples), "--fields", str(fields), "--vocab",
            str(vocab), "--zipf", str(zipf), "--seed", str(seed), "--format", fmt]
    return list(args) + list(extra)


def text(samples, vocab=20000, words=150, sd=4, seed=1):
    return ["--layout", "text", "--samples", str(samples), "--vocab", str(vocab), "--words",
            str(words), "--logit-sd", str(sd), "--seed", str(seed), "--format", "libsvm"]


DATASETS = {
    # CTR-like, lr truth: three sizes, two vocabularies, three skews.
    "ctr-lr-1k": ("tune", ctr("lr", 1000, fields=10, vocab=100, seed=2), CTR),
    "ctr-lr-10k": ("tune", ctr("lr", 10000, vocab=200, seed=3), CTR),
    "ctr-lr-10k-z0.8": ("tune", ctr("lr", 10000, vocab=1000, zipf=0.8, seed=4), CTR),
    "ctr-lr-100k": ("tune", ctr("lr", 100000, vocab=10000, seed=5), CTR),
    "ctr-lr-100k-z1.5": ("tune", ctr("lr", 100000, vocab=100000, zipf=1.5, seed=6), CTR),
    "ctr-lr-1m": ("large", ["--truth", "lr", "--samples", "1000000", "--features", "16777216",
                            "--seed", "1", "--format", "libffm"], CTR),
    "ctr-lr-10m": ("huge", ["--truth", "lr", "--samples", "10000000", "--features",
                            "16777216", "--seed", "7", "--format", "libffm"], LINEAR),
    # Interactions: fm, ffm and mlp truths.
    "ctr-fm-3k": ("tune", ctr("fm", 3000, fields=10, vocab=50, seed=8), CTR),
    "ctr-fm-30k": ("tune", ctr("fm", 30000, fields=20, vocab=100, seed=9), CTR),
    "ctr-fm-100k": ("tune", ctr("fm", 100000, fields=6, vocab=100, seed=5), CTR),
    "ctr-fm-500k": ("large", ctr("fm", 500000, fields=20, seed=11), CTR),
    "ctr-ffm-30k": ("tune", ctr("ffm", 30000, fields=10, vocab=100, seed=12), CTR),
    "ctr-ffm-200k": ("large", ctr("ffm", 200000, fields=10, vocab=300, seed=13), CTR),
    "ctr-mlp-10k": ("tune", ctr("mlp", 10000, fields=6, vocab=50,
                                 extra=["--hidden", "4"], seed=14), CTR),
    "ctr-mlp-100k": ("tune", ctr("mlp", 100000, fields=6, vocab=50,
                                  extra=["--hidden", "4"], seed=3), CTR),
    # Criteo's layout: 13 integer and 26 categorical columns.
    "criteo-lr-50k": ("tune", ["--truth", "lr", "--samples", "50000", "--format", "criteo",
                               "--fields", "26", "--numeric", "13", "--vocab", "500",
                               "--seed", "15"], CTR),
    # Text-like: unit-norm tf-idf rows over 20k-100k words.
    "text-1.5k": ("tune", text(1500, seed=11), TEXT),
    "text-10k": ("tune", text(10000, vocab=50000, words=300, seed=12), TEXT),
    "text-20k-long": ("large", text(20000, vocab=100000, words=2500, seed=13), TEXT),
}
TEST_SAMPLES = {"ctr-lr-1k": 5000, "text-1.5k": 1500}


def set_names(spec):
    if spec == "tune":
        return [n for n, d in DATASETS.items() if d[0] == "tune"]
    if spec == "small":
        return [n for n, d in DATASETS.items() if d[0] == "tune" and gen_samples(n) <= 30000]
    if spec == "all":
        return list(DATASETS)
    if spec == "nohuge":
        return [n for n, d in DATASETS.items() if d[0] != "huge"]
    return spec.split(",")


def gen_samples(name):
    args = DATASETS[name][1]
    return int(args[args.index("--samples") + 1])


def fmt_of(name):
    args = DATASETS[name][1]
    return args[args.index("--format") + 1] if "--format" in args else "libsvm"


# ---------------------------------------------------------------- grids
# Hyper-parameters per unit of feature value (ferry-train multiplies steps by s = 1 / rms and
# divides l1 by s, l2 by s^2). Keys: flag names without "--"; "batch" is the data-size rule's
# updates per epoch U (batch = nearest power of two of N / U, within [bmin, 256]).
GRIDS = {
    "ftrl": {"alpha": [0.2, 0.4, 0.8], "beta": [3, 10, 30]},
    "lr": {"lr": [0.1, 0.2, 0.4], "initial-accumulator": [3, 10, 30]},
    "fm": {"lr": [0.04, 0.08, 0.16], "factor-l2": [1e-3, 1e-2]},
    "ffm": {"lr": [0.04, 0.08, 0.16], "factor-l2": [1e-4, 1e-3]},
    "mlp": {"lr": [0.02, 0.05, 0.1], "dense-lr": [1e-3, 3e-3]},
    "deepfm": {"lr": [0.01, 0.02, 0.05], "dense-lr": [1e-3, 3e-3]},
}
# The defaults (models/train/model_def.h), as grid points: the report ranks them too.
DEFAULT_POINTS = {
    "ftrl": {"alpha": 0.4, "beta": 10},
    "lr": {"lr": 0.1, "initial-accumulator": 30},
    "fm": {"lr": 0.04, "factor-l2": 1e-2},
    "ffm": {"lr": 0.08, "factor-l2": 1e-4},
    "mlp": {"lr": 0.05, "dense-lr": 1e-3},
    "deepfm": {"lr": 0.02, "dense-lr": 1e-3},
}
# Alternatives the "batch" phase tries with the default hyper-parameters.
BATCH_ALTERNATIVES = {f"U{u}-b{b}": (u, b) for u in (64, 128, 256, 512, 1024) for b in (4, 16)}
# Linear weights' keys, per unit of feature value (ferry-train multiplies its defaults alike):
# "lr" only for the lr model; factors' and embeddings' steps are absolute (model_def.cc).
STEP_KEYS = {"alpha"}
L1_KEYS = {"l1"}
L2_KEYS = {"l2"}


def grid_points(model):
    g = GRIDS[model]
    keys = sorted(g)
    for values in itertools.product(*(g[k] for k in keys)):
        yield dict(zip(keys, values))


# ---------------------------------------------------------------- helpers
def build(d):
    # A build of its own (release): nothing else rebuilds it while the sweep runs, so every run
    # of a sweep uses the same binaries. Always run ninja: a stale binary would be measured.
    if not os.path.exists(os.path.join(d, "build.ninja")):
        subprocess.run(["meson", "setup", d, ROOT, "--buildtype=release", "-Dtests=false",
                        "-Dbenchmarks=false"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", d, "tools/train/ferry-train", "tools/gen/ferry-gen",
                    "tools/train/ferry-predict"], check=True, stdout=subprocess.DEVNULL)


def log(*a):
    print(f"[sweep {time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def run(cmd, timeout=3600, **kw):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    return p, time.time() - t0


class Sweep:
    def __init__(self, a):
        self.a = a
        self.out = a.out
        os.makedirs(self.out, exist_ok=True)
        self.results_path = os.path.join(self.out, "results.jsonl")
        self.results = {}
        if os.path.exists(self.results_path):
            for line in open(self.results_path):
                if line.strip():
                    r = json.loads(line)
                    self.results[r["key"]] = r
        self.train_bin = os.path.join(a.build, "tools/train/ferry-train")
        self.gen_bin = os.path.join(a.build, "tools/gen/ferry-gen")
        self.predict_bin = os.path.join(a.build, "tools/train/ferry-predict")
        if not a.no_build:
            build(a.build)

    def record(self, r):
        self.results[r["key"]] = r
        with open(self.results_path, "a") as f:
            f.write(json.dumps(r) + "\n")

    # Data, generated once per argument list (a stamp holds it).
    def data(self, name):
        d = os.path.join(self.out, "data", name)
        os.makedirs(d, exist_ok=True)
        args = DATASETS[name][1] + ["--test-samples", str(TEST_SAMPLES.get(name, 20000))]
        stamp = os.path.join(d, "stamp")
        tr, te = os.path.join(d, "train"), os.path.join(d, "test")
        if not (os.path.exists(stamp) and open(stamp).read() == " ".join(args)):
            log(f"ferry-gen {name}: {' '.join(args)}")
            p, _ = run([self.gen_bin] + args + ["--out", tr, "--test-out", te])
            if p.returncode != 0:
                raise SystemExit(f"ferry-gen failed for {name}: {p.stderr}")
            open(os.path.join(d, "gen.txt"), "w").write(p.stdout)
            open(stamp, "w").write(" ".join(args))
        return tr, te

    def bayes(self, name):
        path = os.path.join(self.out, "data", name, "gen.txt")
        for line in open(path):
            if line.startswith("bayes"):
                w = line.split()
                return float(w[w.index("logloss") + 1]), float(w[w.index("auc") + 1])
        return None, None

    # 1 / rms of the first 20000 lines' values, as ferry-train's probe computes it.
    def scale(self, name):
        tr, _ = self.data(name)
        key = "scale:" + name
        if key in self.results:
            return self.results[key]["scale"]
        fmt = fmt_of(name)
        sq, n = 0.0, 0
        with open(tr) as f:
            for i, line in enumerate(f):
                if i >= 20000:
                    break
                if fmt == "criteo":
                    parts = line.rstrip("\n").split("\t")[1:]
                    n += sum(1 for c in parts if c != "")
                    sq += sum(1 for c in parts if c != "")
                    continue
                for tok in line.split()[1:]:
                    v = float(tok.rsplit(":", 1)[1])
                    sq += v * v
                    n += 1
        s = min(max(1.0 / math.sqrt(sq / n), 1e-3), 1e3) if sq > 0 else 1.0
        self.record({"key": key, "scale": s})
        return s

    def ferry(self, name, model, flags, tag, batch_rule=None, timeout=3600):
        tr, te = self.data(name)
        key = f"ferry:{name}:{model}:{tag}"
        if key in self.results:
            return self.results[key]
        args = ["--model", model, "--format", fmt_of(name), "--train", tr, "--test", te]
        args += flags
        if batch_rule:
            n = int(gen_samples(name) * 0.9)
            u, bmin = batch_rule
            b = 2 ** round(math.log2(max(n / u, 1)))
            args += ["--batch-size", str(min(max(b, bmin), 256))]
        metrics = os.path.join(self.out, "m.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        p, secs = run([self.train_bin] + args + ["--metrics-json", metrics, "--progress",
                                                 "never", "-q"], timeout=timeout)
        r = {"key": key, "set": name, "model": model, "tag": tag, "flags": flags,
             "ok": p.returncode == 0, "wall_s": secs}
        if p.returncode == 0:
            last = json.loads(open(metrics).read().strip().split("\n")[-1])
            for k in ("logloss", "auc", "calibration", "epoch", "kept_epoch", "batch_size",
                      "validation_logloss", "samples_per_sec"):
                r[k] = last.get(k)
        else:
            r["error"] = (p.stderr or p.stdout)[-400:]
            log(f"FAILED {key}: {r['error']}")
        self.record(r)
        log(f"{key}: logloss {r.get('logloss')} auc {r.get('auc')} epochs {r.get('epoch')} "
            f"({secs:.1f} s)")
        return r

    def grid_flags(self, name, point, model):
        s = self.scale(name)
        flags = []
        for k, v in sorted(point.items()):
            if k in STEP_KEYS or (k == "lr" and model == "lr"):
                v = v * s
            elif k in L1_KEYS:
                v = v / s
            elif k in L2_KEYS:
                v = v / (s * s)
            flags += [f"--{k}", f"{v:.6g}"]
        return flags

    # LIBLINEAR -s 0 -B 1: best C by its own cross-validation, and C = 1. libsvm input only
    # (the libffm sets are converted: field:idx:val -> idx:val with a field offset).
    def libsvm_of(self, name):
        tr, te = self.data(name)
        fmt = fmt_of(name)
        if fmt == "libsvm":
            return tr, te
        if fmt != "libffm":
            return None, None
        out = []
        for src in (tr, te):
            dst = src + ".svm"
            if not os.path.exists(dst):
                with open(src) as f, open(dst, "w") as g:
                    for line in f:
                        w = line.split()
                        feats = []
                        for tok in w[1:]:
                            fld, idx, val = tok.split(":")
                            feats.append((int(idx) + 1, val))
                        feats.sort()
                        g.write(w[0] + "".join(f" {i}:{v}" for i, v in feats) + "\n")
            out.append(dst)
        return out[0], out[1]

    def liblinear(self, name):
        key = f"liblinear:{name}"
        if key in self.results:
            return self.results[key]
        tr, te = self.libsvm_of(name)
        if tr is None:
            return None
        r = {"key": key, "set": name}
        model = os.path.join(self.out, "ll.model")
        pred = os.path.join(self.out, "ll.pred")
        if gen_samples(name) <= 1000000:
            p, secs = run(["liblinear-train", "-s", "0", "-B", "1", "-C", tr], timeout=7200)
            best = [l for l in p.stdout.splitlines() if "Best C" in l]
            r["best_c"] = float(best[-1].split("=")[1].split()[0]) if best else 1.0
            r["search_s"] = secs
        else:
            r["best_c"] = self.results.get("liblinear:ctr-lr-1m", {}).get("best_c", 1.0)
            r["best_c_from"] = "ctr-lr-1m"
        for tag, c in (("c1", 1.0), ("best", r["best_c"])):
            p, secs = run(["liblinear-train", "-s", "0", "-B", "1", "-c", str(c), "-q", tr, model],
                          timeout=7200)
            run(["liblinear-predict", "-b", "1", te, model, pred])
            ll, auc = metrics_of(pred, te, liblinear=True)
            r[f"{tag}_logloss"], r[f"{tag}_auc"], r[f"{tag}_train_s"] = ll, auc, secs
        self.record(r)
        log(f"{key}: best C {r['best_c']}: {r['best_logloss']:.5f} / {r['best_auc']:.5f}; "
            f"C=1: {r['c1_logloss']:.5f}")
        return r

    def libfm(self, name):
        if not self.a.libfm:
            return None
        key = f"libfm:{name}"
        if key in self.results:
            return self.results[key]
        tr, te = self.libsvm_of(name)
        if tr is None:
            return None
        pred = os.path.join(self.out, "fm.pred")
        iters = self.a.libfm_iter if gen_samples(name) <= 600000 else max(
            10, self.a.libfm_iter // 3)
        p, secs = run([self.a.libfm, "-task", "c", "-train", tr, "-test", te, "-dim", "1,1,8",
                       "-iter", str(iters), "-method", "mcmc", "-init_stdev", "0.1",
                       "-out", pred], timeout=14400)
        r = {"key": key, "set": name, "ok": p.returncode == 0, "train_s": secs, "iter": iters}
        if p.returncode == 0:
            r["logloss"], r["auc"] = metrics_of(pred, te)
        self.record(r)
        log(f"{key}: {r.get('logloss')} / {r.get('auc')} ({secs:.0f} s)")
        return r


def point_tag(point):
    return ",".join(f"{k}={v:g}" for k, v in sorted(point.items()))


# ---------------------------------------------------------------- phases
def phase_tune(sw, sets, models):
    for model in models:
        for name in sets:
            if model not in DATASETS[name][2]:
                continue
            for point in grid_points(model):
                sw.ferry(name, model, sw.grid_flags(name, point, model), "grid:" + point_tag(point))


def phase_defaults(sw, sets, models):
    for name in sets:
        for model in models:
            if model in DATASETS[name][2]:
                for rep in range(sw.a.repeat):
                    sw.ferry(name, model, [], "default" + (f"#{rep}" if rep else ""))


def phase_batch(sw, sets, models):
    for name in sets:
        for model in models:
            if model in DATASETS[name][2]:
                for rule, ub in BATCH_ALTERNATIVES.items():
                    sw.ferry(name, model, [], "batch:" + rule, batch_rule=ub)


# Refit: the default run's kept pass count, trained again on all the training lines (nothing
# held out): what the held-out tenth costs on small data.
def phase_refit(sw, sets, models):
    for name in sets:
        for model in models:
            if model not in DATASETS[name][2]:
                continue
            d = sw.ferry(name, model, [], "default")
            if d.get("ok"):
                k = d["kept_epoch"]
                sw.ferry(name, model, ["--epochs", str(k), "--validation-fraction", "0"],
                         f"refit:{k}")


def phase_refs(sw, sets, models):
    for name in sets:
        if "lr" in models or "ftrl" in models:
            sw.liblinear(name)
        if "fm" in models and "fm" in DATASETS[name][2]:
            sw.libfm(name)


# The MLP and DeepFM after one pass (--epochs 1): the automatic passes must never end worse.
def phase_firstpass(sw, sets, models):
    for name in sets:
        for model in ("mlp", "deepfm"):
            if model in models and model in DATASETS[name][2]:
                sw.ferry(name, model, ["--epochs", "1"], "first-pass")


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def fmt(x, spec=".5f"):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def phase_report(sw, sets, models, doc):
    R = sw.results
    ok = lambda r: r is not None and r.get("ok")
    grid_runs = lambda name, model: [r for r in R.values() if r.get("set") == name and
                                     r.get("model") == model and
                                     r.get("tag", "").startswith("grid:") and r.get("ok")]
    out = ["# ferry-train's defaults: the sweep", "",
           f"Generated by `perf/train/sweep.py` (do not edit by hand; rerun it). "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every figure is the test "
           "set's (20,000 samples; 5,000 for ctr-lr-1k, 1,500 for text-1.5k), one run each "
           "(asp: runs differ in the third decimal, more on the smallest sets).", "",
           "## Data sets", "", "| set | ferry-gen | samples | Bayes logloss / AUC |",
           "|---|---|---|---|"]
    for name in sets:
        gl, ga = sw.bayes(name)
        out.append(f"| {name} | `{' '.join(DATASETS[name][1])}` | {gen_samples(name):,} | "
                   f"{fmt(gl)} / {fmt(ga, '.4f')} |")
    # The goals.
    out += ["", "## The defaults against the references", "",
            "No hyper-parameter flag at all (`ferry-train --model M --format F --train ... "
            "--test ...`). References: lr and ftrl against LIBLINEAR `-s 0 -B 1` at the best C "
            "its own cross-validation finds (`liblinear-train -C`); fm against libFM's MCMC "
            f"(`-method mcmc -dim 1,1,8 -iter {sw.a.libfm_iter}`) where it was run; ffm, mlp "
            "and deepfm against the best point of their grid (below) on the same set. Goal: "
            "ratio ≤ 1.01.", "",
            "| set | model | logloss | AUC | calibration | epochs (kept) | reference | "
            "ratio | ≤ 1.01 |", "|---|---|---|---|---|---|---|---|---|"]
    misses = []
    for name in sets:
        ll = R.get(f"liblinear:{name}")
        fm = R.get(f"libfm:{name}")
        for model in models:
            d = R.get(f"ferry:{name}:{model}:default")
            if not ok(d):
                continue
            ref, what = None, ""
            if model in ("lr", "ftrl") and ll:
                ref, what = ll["best_logloss"], f"LIBLINEAR C={ll['best_c']:g}"
            elif model == "fm" and ok(fm):
                ref, what = fm["logloss"], "libFM MCMC"
            else:
                g = grid_runs(name, model)
                if g:
                    ref, what = min(r["logloss"] for r in g), "best of grid"
            ratio = d["logloss"] / ref if ref else None
            met = "" if ratio is None else ("met" if ratio <= 1.01 else "**missed**")
            if ratio is not None and ratio > 1.01:
                misses.append((name, model, ratio, what))
            kept = f"{d.get('epoch')} ({d.get('kept_epoch')}{', refit' if d.get('refit') else ''})"
            out.append(f"| {name} | {model} | {fmt(d['logloss'])} | {fmt(d['auc'], '.4f')} | "
                       f"{fmt(d.get('calibration'), '.3f')} | {kept} | {fmt(ref)} ({what}) | "
                       f"{fmt(ratio, '.4f')} | {met} |")
    out += ["", f"Missed (ratio > 1.01): {len(misses)}." if misses else "Every ratio ≤ 1.01.", ""]
    for name, model, ratio, what in misses:
        out.append(f"- {name} / {model}: {ratio:.4f}× {what}")
    # LIBLINEAR's own figures.
    out += ["", "## LIBLINEAR", "", "| set | best C (-C) | logloss at best C | AUC | logloss at C=1 |",
            "|---|---|---|---|---|"]
    for name in sets:
        ll = R.get(f"liblinear:{name}")
        if ll:
            out.append(f"| {name} | {ll['best_c']:g}{' (1M set)' if ll.get('best_c_from') else ''}"
                       f" | {fmt(ll['best_logloss'])} | {fmt(ll['best_auc'], '.4f')} | "
                       f"{fmt(ll['c1_logloss'])} |")
    # Model against model where the truth is nonlinear; the MLP's first pass.
    out += ["", "## MLP and DeepFM: against FM, and against their first pass", "",
            "| set | fm | mlp | deepfm | mlp after 1 pass | deepfm after 1 pass |",
            "|---|---|---|---|---|---|"]
    for name in sets:
        row = [R.get(f"ferry:{name}:{m}:default") for m in ("fm", "mlp", "deepfm")]
        first = [R.get(f"ferry:{name}:{m}:first-pass") for m in ("mlp", "deepfm")]
        if not ok(row[1]):
            continue
        cells = [fmt(r["logloss"]) if ok(r) else "—" for r in row + first]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    # The family's choice.
    out += ["", "## The grids: each point over the family", "",
            "Each model's grid on every tune set it applies to (the data-size rule sets the "
            "batch size; steps per unit of feature value, as ferry-train's defaults); a point's "
            "score is the geometric mean, over the sets, of its test logloss divided by the "
            "set's best point. The default is marked.", ""]
    for model in models:
        rows = {}
        for name in sets:
            g = grid_runs(name, model)
            if not g:
                continue
            best = min(r["logloss"] for r in g)
            for r in g:
                rows.setdefault(r["tag"][5:], []).append(r["logloss"] / best)
        if not rows:
            continue
        n = max(len(v) for v in rows.values())
        ranked = sorted((gmean(v), max(v), k) for k, v in rows.items() if len(v) == n)
        dflt = point_tag(DEFAULT_POINTS[model])
        out += [f"### {model} ({n} sets)", "", "| rank | point | gmean / best | worst |",
                "|---|---|---|---|"]
        for i, (g, w, k) in enumerate(ranked):
            if i < 5 or k == dflt:
                out.append(f"| {i + 1} | `{k}`{' (default)' if k == dflt else ''} | {g:.4f} | "
                           f"{w:.4f} |")
        out.append("")
    open(doc, "w").write("\n".join(out) + "\n")
    log(f"report: {doc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-sweep"))
    ap.add_argument("--no-build", action="store_true", help="use --build as it is")
    ap.add_argument("--out", default=os.environ.get("SWEEP_OUT", "/tmp/ferry-sweep"))
    ap.add_argument("--phase", default="defaults,refs,tune,firstpass,report")
    ap.add_argument("--sets", default="tune")
    ap.add_argument("--models", default="lr,ftrl,fm,ffm,mlp,deepfm")
    ap.add_argument("--libfm", default=os.environ.get("LIBFM"))
    ap.add_argument("--libfm-iter", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--doc")
    a = ap.parse_args()
    sw = Sweep(a)
    sets = set_names(a.sets)
    models = a.models.split(",")
    phases = {"defaults": phase_defaults, "refs": phase_refs, "tune": phase_tune,
              "firstpass": phase_firstpass, "batch": phase_batch, "refit": phase_refit}
    for ph in a.phase.split(","):
        if ph == "report":
            phase_report(sw, sets, models, a.doc or os.path.join(a.out, "training-sweep.md"))
        elif ph in phases:
            phases[ph](sw, sets, models)
        else:
            raise SystemExit(f"unknown phase {ph} ({', '.join(phases)}, report)")


if __name__ == "__main__":
    main()
