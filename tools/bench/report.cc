#include "tools/bench/report.h"

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <utility>

#include "tools/bench/timer.h"
#include "tools/common/output.h"
#include "tools/plot/json.h"
#include "tools/plot/plot.h"

namespace ferry::bench {

using tools::Finite;
using tools::kReportRule;
using tools::Printf;
using tools::ReportLine;

namespace {

// The first of `keys` each device reports (backends name these differently): one value when all
// devices agree, else "dev=value, ...", or "n/a" when none reports it.
std::string FindAttribute(const std::vector<DeviceInfo>& devices,
                          std::initializer_list<const char*> keys) {
  std::vector<std::pair<std::string, std::string>> found;
  for (const DeviceInfo& d : devices) {
    for (const char* k : keys) {
      auto it = d.attributes.find(k);
      if (it != d.attributes.end() && !it->second.empty()) {
        found.emplace_back(d.name, it->second);
        break;
      }
    }
  }
  if (found.empty()) return "n/a";
  bool same = true;
  for (const auto& f : found) same = same && f.second == found.front().second;
  if (same) return found.front().second;
  std::string out;
  for (const auto& [name, value] : found) out += (out.empty() ? "" : ", ") + name + "=" + value;
  return out;
}

std::string Title(const RunHeader& h) {
  std::string op(BenchOpName(h.config.op));
  return "Ferry " + op + (h.config.mode == Mode::kLatency ? " latency test" : " bandwidth test");
}

std::string OnOff(bool b) {
  return b ? "ON" : "OFF";
}

std::string Csv(double v) {
  return Printf("%.6f", Finite(v));
}

std::string ChecksLine(const BenchConfig& c) {
  switch (c.check) {
    case CheckPolicy::kBoth:
      return "full (every transfer verified) pass, then ref (timed as the reference tools "
             "check) pass";
    case CheckPolicy::kFull:
      return "full (every transfer verified)";
    case CheckPolicy::kRef:
      return "ref (as the reference tools: arrival only, one buffer)";
  }
  return "?";
}

// The pass whose rows a plot and "results" carry: the timed one.
Check TimedCheck(const BenchConfig& c) {
  return c.check == CheckPolicy::kFull ? Check::kFull : Check::kRef;
}

}  // namespace

std::vector<std::string> CsvColumns(Mode mode) {
  if (mode == Mode::kLatency) {
    return {"transport",    "op",         "bytes",          "iterations",
            "t_min_usec",   "t_max_usec", "t_typical_usec", "t_avg_usec",
            "t_stdev_usec", "p99_usec",   "p99_9_usec",     "check"};
  }
  return {"transport",     "op",           "bytes", "iterations", "bw_peak_mb_s", "bw_avg_mb_s",
          "msg_rate_mpps", "rows_per_sec", "check"};
}

std::string FormatTextHeader(const RunHeader& h) {
  const BenchConfig& c = h.config;
  std::string out = kReportRule;
  out += Printf("%*s%s\n", 20, "", Title(h).c_str());
  out += ReportLine("Transport", h.transport);
  std::string devs;
  for (const DeviceInfo& d : h.devices) {
    if (!devs.empty()) devs += ", ";
    devs += d.name + (d.kind.empty() ? "" : " (" + d.kind + ")");
  }
  out += ReportLine("Device", devs.empty() ? "n/a" : devs);
  out += ReportLine("MTU", FindAttribute(h.devices, {"active_mtu", "mtu", "max_mtu"}));
  out += ReportLine("GID index", FindAttribute(h.devices, {"gid_index", "sgid_index"}));
  out += ReportLine("Inline size",
                    FindAttribute(h.devices, {"max_inline", "inline_size", "max_inline_data"}));
  out += ReportLine("Operation", std::string(BenchOpName(c.op)));
  out += ReportLine("Endpoints", std::to_string(c.endpoints) + (c.bidir ? " per direction" : ""));
  out += ReportLine("Threads", std::to_string(c.threads));
  if (c.mode == Mode::kBandwidth) {
    out += ReportLine("TX depth", std::to_string(c.depth));
    out += ReportLine("Bidirectional", OnOff(c.bidir));
  }
  if (UsesRows(c.op)) {
    out += ReportLine("Rows", std::to_string(c.rows) + " x " + std::to_string(c.row_size) +
                                  " B in a " + std::to_string(c.region_size) + " B region");
  }
  out += ReportLine("Iterations", c.duration_s > 0 ? Printf("%g s per size", c.duration_s)
                                                   : std::to_string(c.iters) + " per size");
  out += ReportLine("Checks", ChecksLine(c));
  if (c.mode == Mode::kLatency) {
    const bool full = IsRead(c.op);
    out += ReportLine("Latency", full ? "full round trip" : "half round trip (ping-pong)");
    out += ReportLine("Timer", TickClock::Get().description());
  }
  out += kReportRule;
  if (c.mode == Mode::kLatency) {
    out +=
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
        "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]  check\n";
  } else {
    out += " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
    out += UsesRows(c.op) ? "    Rows/s      check\n" : "  check\n";
  }
  return out;
}

std::string FormatTextRow(const RunHeader&, const LatencyRow& r) {
  const LatencySummary& s = r.usec;
  return Printf(
      " %-7llu %-10llu %-7.2f        %-7.2f        %-7.2f          %-7.2f        "
      "%-7.2f          %-7.2f                %-7.2f   %s\n",
      static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.iterations),
      s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999,
      std::string(CheckName(r.check)).c_str());
}

std::string FormatTextRow(const RunHeader& h, const BandwidthRow& r) {
  std::string out = Printf(" %-10llu %-10llu     %-10.2f         %-10.2f           %-10.6f",
                           static_cast<unsigned long long>(r.bytes),
                           static_cast<unsigned long long>(r.iterations), r.bw.bw_peak_mb,
                           r.bw.bw_avg_mb, r.bw.msg_rate_mpps);
  if (UsesRows(h.config.op)) out += Printf("  %-10.0f", r.bw.rows_per_sec);
  return out + "  " + std::string(CheckName(r.check)) + "\n";
}

std::string FormatTextFooter() {
  return kReportRule;
}

std::string FormatText(const Report& report) {
  std::string out = FormatTextHeader(report.header);
  for (const LatencyRow& r : report.latency) out += FormatTextRow(report.header, r);
  for (const BandwidthRow& r : report.bandwidth) out += FormatTextRow(report.header, r);
  return out + FormatTextFooter();
}

std::string FormatJson(const Report& report) {
  const RunHeader& h = report.header;
  const BenchConfig& c = h.config;
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceInfo& d : h.devices) {
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [k, v] : d.attributes) attrs[k] = v;
    devices.push_back(
        {{"name", d.name}, {"kind", d.kind}, {"numa_node", d.numa_node}, {"attributes", attrs}});
  }
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json checked = nlohmann::json::array();
  const Check timed = TimedCheck(c);
  for (const LatencyRow& r : report.latency) {
    (r.check == timed ? results : checked)
        .push_back({{"bytes", r.bytes},
                    {"iterations", r.iterations},
                    {"t_min_usec", Finite(r.usec.min)},
                    {"t_max_usec", Finite(r.usec.max)},
                    {"t_typical_usec", Finite(r.usec.typical)},
                    {"t_avg_usec", Finite(r.usec.avg)},
                    {"t_stdev_usec", Finite(r.usec.stdev)},
                    {"p99_usec", Finite(r.usec.p99)},
                    {"p99_9_usec", Finite(r.usec.p999)},
                    {"check", CheckName(r.check)}});
  }
  for (const BandwidthRow& r : report.bandwidth) {
    nlohmann::json row = {{"bytes", r.bytes},
                          {"iterations", r.iterations},
                          {"bw_peak_mb_s", Finite(r.bw.bw_peak_mb)},
                          {"bw_avg_mb_s", Finite(r.bw.bw_avg_mb)},
                          {"msg_rate_mpps", Finite(r.bw.msg_rate_mpps)},
                          {"seconds", Finite(r.bw.seconds)},
                          {"check", CheckName(r.check)}};
    if (UsesRows(c.op)) row["rows_per_sec"] = Finite(r.bw.rows_per_sec);
    (r.check == timed ? results : checked).push_back(row);
  }
  nlohmann::json j = {
      {"tool", h.tool},
      {"test", ModeName(c.mode)},
      {"transport", h.transport},
      {"op", BenchOpName(c.op)},
      {"latency_definition",
       c.mode == Mode::kBandwidth ? "n/a" : (IsRead(c.op) ? "round_trip" : "half_round_trip")},
      {"config",
       {{"endpoints", c.endpoints},
        {"threads", c.threads},
        {"depth", c.depth},
        {"bidir", c.bidir},
        {"check", CheckPolicyName(c.check)},
        {"iterations", c.iters},
        {"duration_s", Finite(c.duration_s)},
        {"warmup", c.warmup},
        {"rows", c.rows},
        {"row_size", c.row_size},
        {"region_size", c.region_size},
        {"seed", c.seed}}},
      {"devices", devices},
      {"results", results},
  };
  if (!checked.empty()) j["checked_results"] = checked;
  return j.dump(2) + "\n";
}

Status WritePlot(const Report& report, const std::string& path) {
  // Through the JSON form on purpose: one conversion (tools/plot/json.h) serves both this and
  // ferry-plot, so the two can never draw the same run differently.
  FERRY_ASSIGN_OR_RETURN(plot::PlotSpec spec,
                         plot::SpecFromRuns({{"", "", FormatJson(report)}}, plot::Metric::kAuto));
  return plot::WriteSvg(spec, path);
}

std::string FormatCsv(const Report& report) {
  const RunHeader& h = report.header;
  std::string out;
  const std::vector<std::string> cols = CsvColumns(h.config.mode);
  for (size_t i = 0; i < cols.size(); ++i) out += (i ? "," : "") + cols[i];
  out += "\n";
  // transport and op names are [a-z_] only, so no quoting is needed.
  const std::string prefix = h.transport + "," + std::string(BenchOpName(h.config.op)) + ",";
  for (const LatencyRow& r : report.latency) {
    out += prefix + std::to_string(r.bytes) + "," + std::to_string(r.iterations) + "," +
           Csv(r.usec.min) + "," + Csv(r.usec.max) + "," + Csv(r.usec.typical) + "," +
           Csv(r.usec.avg) + "," + Csv(r.usec.stdev) + "," + Csv(r.usec.p99) + "," +
           Csv(r.usec.p999) + "," + std::string(CheckName(r.check)) + "\n";
  }
  for (const BandwidthRow& r : report.bandwidth) {
    out += prefix + std::to_string(r.bytes) + "," + std::to_string(r.iterations) + "," +
           Csv(r.bw.bw_peak_mb) + "," + Csv(r.bw.bw_avg_mb) + "," + Csv(r.bw.msg_rate_mpps) + "," +
           Csv(r.bw.rows_per_sec) + "," + std::string(CheckName(r.check)) + "\n";
  }
  return out;
}

}  // namespace ferry::bench
