// Result records of a benchmark run and their formatters: perftest-style text, JSON and CSV.
//
// Text output keeps perftest's column names so existing habits and scripts carry over:
//   bandwidth: #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps] (+ Rows/s)
//   latency:   #bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]
//              t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]
// MB = 2^20 bytes, as perftest prints it. JSON is one object (strictly valid, no NaN); CSV is one
// header line plus one line per size and pass, every line with the same column count.
//
// Passes (config.h, Check): every row says how its transfers were checked, "full" (the checked
// pass) or "ref" (the timed pass, checked the way the reference tools check). Text and CSV carry
// a `check` column; JSON puts the timed pass in "results" (what ferry-plot draws) and, when the
// run made both, the checked pass in "checked_results". A checked figure is never to be set
// against an unchecked reference: compare "ref" rows with perftest / ucx_perftest.
//
// Thread-safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/bench/config.h"
#include "tools/bench/stats.h"
#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::bench {

struct RunHeader {
  std::string tool;       // "ferry-lat" / "ferry-bw"
  std::string transport;  // "tcp", "ucx", "verbs"
  BenchConfig config;
  std::vector<DeviceInfo> devices;  // as the backend reports them
};

struct LatencyRow {
  uint64_t bytes = 0;
  uint64_t iterations = 0;
  Check check = Check::kFull;
  LatencySummary usec;
};

struct BandwidthRow {
  uint64_t bytes = 0;
  uint64_t iterations = 0;
  Check check = Check::kFull;
  BandwidthSummary bw;
};

struct Report {
  RunHeader header;
  std::vector<LatencyRow> latency;      // latency runs
  std::vector<BandwidthRow> bandwidth;  // bandwidth runs
};

// The header block (title, transport, devices, MTU, GID index, inline size, settings) and the
// column line, then one line per row.
std::string FormatTextHeader(const RunHeader& header);
std::string FormatTextRow(const RunHeader& header, const LatencyRow& row);
std::string FormatTextRow(const RunHeader& header, const BandwidthRow& row);
std::string FormatTextFooter();
std::string FormatText(const Report& report);

std::string FormatJson(const Report& report);
std::string FormatCsv(const Report& report);

// Draws the sweep as an SVG plot to `path` ("-": stdout) with tools/plot, exactly as
// `ferry-plot` draws this report's FormatJson output: latency runs as median and p99 vs message
// size (log-log), bandwidth runs as average MiB/s vs message size (log x). IoError naming the
// path when it cannot be written.
Status WritePlot(const Report& report, const std::string& path);

// The CSV header's column names, in order (tests check rows against it).
std::vector<std::string> CsvColumns(Mode mode);

}  // namespace ferry::bench
