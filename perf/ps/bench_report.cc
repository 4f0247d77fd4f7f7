#include "perf/ps/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ferry::perf {

void CollectingReporter::ReportRuns(const std::vector<Run>& runs) {
  for (const Run& r : runs) {
    if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
    Result res;
    for (const auto& [k, c] : r.counters) res.counters[k] = c.value;
    const double ops = res.counters.count("ops") ? res.counters["ops"] : 0;
    // CPU time of this process: robust to being descheduled on a shared 2-core machine.
    if (ops > 0) res.ns_per_op = r.cpu_accumulated_time * 1e9 / ops;
    results_[r.run_name.function_name] = res;
  }
  ConsoleReporter::ReportRuns(runs);
}

namespace {

std::string Fmt(double v, int prec = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

// Median time and median ratio to absl in the same round of "<op>/<kind>/<n>/<w>".
struct Cell {
  double ns = 0;
  double ratio = 0;  // 0: no absl figure
};
bool FindCell(const std::map<std::string, CollectingReporter::Result>& results, int rounds,
              const std::string& op, const std::string& kind, const std::string& suffix,
              Cell* cell) {
  std::vector<double> ns, ratios;
  for (int r = 0; r < rounds; ++r) {
    const std::string round = "/" + std::to_string(r);
    auto it = results.find(op + "/" + kind + suffix + round);
    if (it == results.end() || it->second.ns_per_op == 0) continue;
    ns.push_back(it->second.ns_per_op);
    // insert_batch and find_batch have no absl counterpart: absl's insert / find_hit stand in.
    const std::string absl_op = op == "insert_batch" ? "insert"
                                : op == "find_batch" ? "find_hit"
                                                     : op;
    auto a = results.find(absl_op + "/absl" + suffix + round);
    if (a != results.end() && a->second.ns_per_op > 0) {
      ratios.push_back(it->second.ns_per_op / a->second.ns_per_op);
    }
  }
  if (ns.empty()) return false;
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  cell->ns = median(ns);
  cell->ratio = ratios.empty() ? 0 : median(ratios);
  return true;
}

}  // namespace

std::string MarkdownTables(const CollectingReporter& reporter, const ReportShape& shape) {
  const auto& results = reporter.results();
  const std::vector<std::string>& kinds = shape.kinds;
  std::ostringstream out;
  for (size_t n : shape.sizes) {
    out << "\n### " << n << " keys\n\n";
    out << "Time per operation in ns, the median of " << shape.rounds
        << " alternating rounds (in parentheses: the median over rounds of the ratio to "
           "absl::flat_hash_map in the same round).\n\n";
    out << "| op | row B |";
    for (const auto& k : kinds) out << " " << k << " |";
    out << "\n|---|---|";
    for (size_t i = 0; i < kinds.size(); ++i) out << "---|";
    out << "\n";
    for (const char* op :
         {"insert", "insert_batch", "find_hit", "find_batch", "find_miss", "gather"}) {
      for (size_t w : shape.widths) {
        const std::string suffix = "/" + std::to_string(n) + "/" + std::to_string(w);
        out << "| " << op << " | " << w << " |";
        for (const auto& k : kinds) {
          Cell c;
          if (!FindCell(results, shape.rounds, op, k, suffix, &c)) {
            out << " - |";
            continue;
          }
          out << " " << Fmt(c.ns);
          if (c.ratio > 0) out << " (" << Fmt(c.ratio, 2) << "x)";
          out << " |";
        }
        out << "\n";
      }
    }
    out << "\nMemory: RSS bytes per entry after " << n
        << " inserts / peak RSS during growth relative to that steady state"
           " (ArrayHashMap: + index bytes per key).\n\n";
    out << "| row B |";
    for (const auto& k : kinds) {
      if (k != "ferry_pack") out << " " << k << " |";
    }
    out << "\n|---|";
    for (size_t i = 0; i + 1 < kinds.size(); ++i) out << "---|";
    out << "\n";
    for (size_t w : shape.widths) {
      out << "| " << w << " |";
      for (const auto& k : kinds) {
        if (k == "ferry_pack") continue;
        auto it = results.find("memory/" + k + "/" + std::to_string(n) + "/" + std::to_string(w));
        if (it == results.end()) {
          out << " - |";
          continue;
        }
        const auto& c = it->second.counters;
        const auto get = [&c](const char* name) {
          const auto f = c.find(name);
          return f == c.end() ? 0.0 : f->second;
        };
        out << " " << Fmt(get("B_per_entry")) << " B / " << Fmt(get("peak_ratio"), 2) << "x";
        if (k.rfind("ferry", 0) == 0) out << " / idx " << Fmt(get("index_B_per_key")) << " B";
        out << " |";
      }
      out << "\n";
    }
  }
  return out.str();
}

std::string CellsTsv(const CollectingReporter& reporter, const ReportShape& shape) {
  const auto& results = reporter.results();
  std::ostringstream out;
  for (size_t n : shape.sizes) {
    for (size_t w : shape.widths) {
      const std::string suffix = "/" + std::to_string(n) + "/" + std::to_string(w);
      for (const char* op :
           {"insert", "insert_batch", "find_hit", "find_batch", "find_miss", "gather"}) {
        for (const std::string& k : shape.kinds) {
          Cell c;
          if (FindCell(results, shape.rounds, op, k, suffix, &c)) {
            out << op << "\t" << k << "\t" << n << "\t" << w << "\t" << Fmt(c.ns) << "\t"
                << Fmt(c.ratio, 2) << "\n";
          }
        }
      }
    }
  }
  return out.str();
}

}  // namespace ferry::perf
