"""Per-round figures of the perf/psbench scripts (builds.sh, apply.sh, threads.sh): keys/s of one op from
ferry-ps-bench's or ps_reference's JSON, and ratios taken round by round, then the median."""
import json
import statistics


def keys_per_sec(path, op):
    """The keys/s of `op` in one run's --json output."""
    with open(path) as f:
        return next(r["keys_per_sec"] for r in json.load(f)["results"] if r["op"] == op)


def ratio(ours, reference):
    """(median, "median x [min-max]") of ours[i] / reference[i] over the rounds."""
    rs = [a / b for a, b in zip(ours, reference)]
    return statistics.median(rs), f"{statistics.median(rs):.2f}x [{min(rs):.2f}-{max(rs):.2f}]"


def emit(lines, doc):
    """Prints the report (lines joined) and writes it to `doc` too when given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if doc:
        with open(doc, "w") as f:
            f.write(text)
