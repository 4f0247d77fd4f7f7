// The ps_bench results: a Google Benchmark reporter that keeps every run's CPU time per
// operation, and the Markdown tables / TSV cells perf/ps/run.sh puts into
// docs/perf/arrayhashmap.md.
//
// Run names are "<op>/<kind>/<keys>/<row bytes>/<round>" for timed cells and
// "memory/<kind>/<keys>/<row bytes>" for memory cells. A timed cell is reported as the median of
// its rounds' times and the median over rounds of its ratio to absl's time IN THE SAME ROUND
// (insert_batch and find_batch, which absl lacks, are set against absl's insert / find_hit).
// Times are the process's CPU time divided by the run's "ops" counter.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace ferry::perf {

class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  struct Result {
    double ns_per_op = 0;
    std::map<std::string, double> counters;
  };
  void ReportRuns(const std::vector<Run>& runs) override;
  bool empty() const { return results_.empty(); }
  const std::map<std::string, Result>& results() const { return results_; }

 private:
  std::map<std::string, Result> results_;
};

struct ReportShape {
  std::vector<size_t> sizes;
  std::vector<size_t> widths;
  std::vector<std::string> kinds;  // columns; the ratio column is "absl"
  int rounds = 1;
};

// Per size: the time table (every op x width x kind) and the memory table.
std::string MarkdownTables(const CollectingReporter& results, const ReportShape& shape);
// One line per timed cell: op, kind, keys, row bytes, median ns, median ratio (0: none).
std::string CellsTsv(const CollectingReporter& results, const ReportShape& shape);

}  // namespace ferry::perf
