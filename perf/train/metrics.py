#!/usr/bin/env python3
"""perf/train/metrics.py — test logloss and exact AUC of a prediction file against the labels of
a LIBSVM / libffm file, for the perf scripts (run.sh, sweep.py).

  metrics.py PREDICTIONS DATA [--liblinear]    prints "LOGLOSS AUC"

PREDICTIONS is one probability per line (ferry-predict, libFM's -out), or with --liblinear the
output of liblinear-predict -b 1 ("labels 0 1" then "<label> <p0> <p1>" per line). A label > 0 is
positive. Probabilities are clamped to [1e-15, 1 - 1e-15] in the log; the AUC gives tied scores
their average rank (the Mann-Whitney statistic, as ferry-train's models/eval/metrics.h).
"""
import math
import sys


def probabilities(pred, liblinear=False):
    lines = open(pred).read().split("\n")
    if liblinear:
        col = lines[0].split()[1:].index("1") + 1
        return [float(l.split()[col]) for l in lines[1:] if l.strip()]
    return [float(l) for l in lines if l.strip()]


def labels_of(data):
    return [1 if float(l.split()[0]) > 0 else 0 for l in open(data) if l.strip()]


def logloss_auc(probs, labels):
    assert len(probs) == len(labels), (len(probs), len(labels))
    eps = 1e-15
    ll = -sum(math.log(max(p if y else 1 - p, eps)) for p, y in zip(probs, labels)) / len(labels)
    order = sorted(range(len(probs)), key=lambda i: probs[i])
    ranks = [0.0] * len(probs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and probs[order[j + 1]] == probs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos = sum(labels)
    neg = len(labels) - pos
    auc = (sum(r for r, y in zip(ranks, labels) if y) - pos * (pos + 1) / 2) / (pos * neg)
    return ll, auc


def metrics_of(pred, data, liblinear=False):
    return logloss_auc(probabilities(pred, liblinear), labels_of(data))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ll, auc = metrics_of(sys.argv[1], sys.argv[2], "--liblinear" in sys.argv[3:])
    print(f"{ll:.6f} {auc:.6f}")
