// A small, self-contained SVG line-plot writer for Ferry's measurement sweeps: the one plot
// writer behind `ferry-lat/ferry-bw --plot`, `ferry-plot` and perf/compare/report.py (which
// hands it a PlotSpec as JSON, see tools/plot/json.h). No runtime dependency (the tools ship in
// the ferry package without gnuplot).
//
// What it draws: a white 900x540 canvas with a title, axis labels, grid and ticks (log axes:
// powers of two for byte sizes, decades otherwise; linear axes: 1-2-5 steps), one polyline per
// series joining its points in ascending x, a marker per point and a legend. Solid series get
// filled markers, dashed ones (references) hollow markers.
//
// The SVG is machine-readable as well: every marker is
//   <circle class="point" data-series="NAME" data-x="X" data-y="Y" .../>
// with X and Y the exact values (shortest round-trip decimal), so tests and scripts can count
// and read the points back.
//
// Usage:
//   plot::PlotSpec spec;
//   spec.title = "ferry-bw: tcp send";  spec.xlabel = "message size (bytes)";
//   spec.ylabel = "bandwidth (MiB/s)";  spec.log_x = true;  spec.x_unit_format = "bytes";
//   spec.series.push_back({"tcp send", {{2, 0.4}, {4, 0.9}}});
//   Status s = plot::WriteSvg(spec, "bw.svg");
//
// Errors: a spec without series, a series without points, a non-finite value, or a value <= 0 on
// a log axis is InvalidArgument naming the series; nothing is written then. Any string (title,
// labels, series names) is safe: it is XML-escaped, and bytes that are not valid UTF-8 or not
// allowed in XML are replaced, so the output is always well-formed XML.
//
// Thread-safety: pure functions over value types.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "transport/status.h"

namespace ferry::plot {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), any order
  bool dashed = false;                            // a reference: dashed line, hollow markers
  int color = -1;  // palette slot (taken modulo the palette size); -1: the series' position
};

struct PlotSpec {
  std::string title, xlabel, ylabel;
  bool log_x = false, log_y = false;
  // "bytes": x ticks read 8, 1K, 64K, 1M (powers of two on a log axis); "" or "number": plain.
  std::string x_unit_format;
  std::vector<Series> series;
  int width = 900, height = 540;  // pixels; at least 300x200
};

// Checks `spec` as described under Errors above.
Status ValidateSpec(const PlotSpec& spec);

// The whole SVG document (UTF-8), or the ValidateSpec error.
Result<std::string> RenderSvg(const PlotSpec& spec);

// Renders and writes to `path` ("-": stdout). IoError naming the path when it cannot be written.
Status WriteSvg(const PlotSpec& spec, const std::string& path);

}  // namespace ferry::plot
