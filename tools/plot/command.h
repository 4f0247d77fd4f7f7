// What `ferry-plot` does, as a library call (its main() only declares the flags):
//
//   ferry-plot [--title T] [--metric M] [--label L ...] -o OUT.svg RUN.json [RUN.json ...]
//   ferry-plot --spec SPEC.json [--title T] -o OUT.svg
//
// Blocking file I/O; thread-safe (no shared state).
#pragma once

#include <string>
#include <vector>

#include "tools/plot/json.h"
#include "transport/status.h"

namespace ferry::plot {

struct PlotCommand {
  std::string out;                  // the SVG to write ("-": stdout)
  std::string spec_path;            // a PlotSpec as JSON, instead of runs
  std::vector<std::string> runs;    // ferry-lat / ferry-bw --json files
  std::vector<std::string> labels;  // legend names, one per run (or none)
  std::string title;                // overrides the spec's or the default title
  std::string metric = "auto";
};

// Usage errors (InvalidArgument): neither or both of --spec and run files, a label count that
// does not match the runs, --metric/--label with --spec, an unknown metric.
Status CheckPlotCommand(const PlotCommand& cmd);

// Reads the inputs, builds the spec and writes the SVG. Errors name the file at fault.
Status RunPlotCommand(const PlotCommand& cmd);

// The whole file, or IoError naming it. Refuses files over 256 MiB (not a plot input).
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace ferry::plot
