// ferry-plot: draws ferry-lat / ferry-bw --json results (or a plot spec) as an SVG sweep plot.
//
//   ferry-plot -o lat.svg lat.json                      # median and p99 vs size, log-log
//   ferry-plot -o bw.svg tcp.json ucx.json --label tcp --label ucx
//   ferry-plot --spec plot.json -o plot.svg             # what perf/compare/report.py does
//
// Exit codes: 0 written, 1 an input could not be read or drawn, 2 bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

#include "tools/common/command.h"
#include "tools/plot/command.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app, {.name = "ferry-plot",
            .summary = "SVG plots of ferry-lat / ferry-bw --json results, or of a plot spec",
            .description = "Draws each result file as a sweep against message size (latency: "
                           "median and p99, log-log;\nbandwidth: MiB/s, log x), several runs on "
                           "one plot. ferry-lat and ferry-bw draw the same\nplot themselves with "
                           "--plot FILE.svg.",
            .examples = {"ferry-bw --transport tcp --local -a --json bw.json && ferry-plot -o "
                         "bw.svg bw.json",
                         "ferry-plot --title 'send latency' -o lat.svg tcp.json ucx.json --label "
                         "tcp --label ucx",
                         "ferry-plot --spec plot.json -o plot.svg"},
            .exit_status = "0 written; 1 an input could not be read or drawn; 2 bad usage.",
            .see_also = {"ferry-lat", "ferry-bw", "docs/tools.md"}});
  ferry::plot::PlotCommand cmd;
  app.add_option("runs", cmd.runs, "ferry-lat / ferry-bw --json result files")
      ->type_name("RESULT.json");
  app.add_option("-o,--output", cmd.out, "SVG file to write (- for stdout)")
      ->required()
      ->type_name("OUT.svg");
  app.add_option("--spec", cmd.spec_path,
                 "draw this plot spec (JSON: title, xlabel, ylabel, log_x, log_y, "
                 "x_unit_format, series[{name, points, dashed, color}])")
      ->type_name("SPEC.json");
  app.add_option("--title", cmd.title, "plot title (default: from the runs or the spec)");
  app.add_option("--metric", cmd.metric,
                 "latency (median and p99 µs), bandwidth (MiB/s), rate (Mpps) or auto "
                 "(latency for ferry-lat results, bandwidth for ferry-bw)")
      ->capture_default_str();
  app.add_option("--label", cmd.labels,
                 "legend name of each result file, in order (default: transport and op)");
  if (std::optional<int> code = ferry::tools::ParseCommandLine(app, argc, argv)) return *code;
  if (ferry::Status s = ferry::plot::CheckPlotCommand(cmd); !s.ok()) {
    return ferry::tools::ReportError("ferry-plot", s.message(), 2);
  }
  if (ferry::Status s = ferry::plot::RunPlotCommand(cmd); !s.ok()) {
    return ferry::tools::ReportError("ferry-plot", s.message(), 1);
  }
  return 0;
}
