// JSON in, PlotSpec out: the two inputs `ferry-plot` draws, kept here so ferry-lat / ferry-bw
// (--plot) and perf/ scripts draw exactly what ferry-plot draws.
//
// 1. A PlotSpec as JSON (what perf/compare/report.py writes):
//      {"title": "...", "xlabel": "...", "ylabel": "...", "log_x": true, "log_y": false,
//       "x_unit_format": "bytes", "width": 900, "height": 540,
//       "series": [{"name": "Ferry tcp", "points": [[8, 1.5], [4096, 3.2]],
//                   "dashed": false, "color": 0}]}
//    Only "series" and each series' "points" are required. An unknown key is an error (a
//    misspelt "log_y" would otherwise draw a linear axis without a word).
//
// 2. The --json output of ferry-lat / ferry-bw (tools/bench/report.cc FormatJson); each run is a
//    sweep drawn against message size (log x, byte ticks):
//      latency    median (t_typical_usec) and p99 (p99_usec, dashed, same colour), µs, log y
//      bandwidth  average bandwidth (bw_avg_mb_s), MiB/s, linear y from 0
//      rate       message rate (msg_rate_mpps), Mpps, linear y from 0
//    kAuto picks latency or bandwidth from the runs' "test"; runs of both kinds are an error.
//
// Errors: InvalidArgument naming the input (`origin`, e.g. the file name) and what is wrong.
// Nothing here throws. Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tools/plot/plot.h"
#include "transport/status.h"

namespace ferry::plot {

enum class Metric { kAuto, kLatency, kBandwidth, kRate };

// "auto", "latency", "bandwidth", "rate".
Result<Metric> ParseMetric(std::string_view name);

// Form 1 above.
Result<PlotSpec> SpecFromJson(std::string_view text, std::string_view origin);

struct RunJson {
  std::string origin;  // for messages: a file name, or "" for an in-memory report
  std::string label;   // the legend name; "" takes "<transport> <op>" from the run
  std::string text;    // the run's --json output
};

// Form 2 above. The title names the tool and run when there is one run, else the metric.
Result<PlotSpec> SpecFromRuns(const std::vector<RunJson>& runs, Metric metric);

}  // namespace ferry::plot
