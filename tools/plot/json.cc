#include "tools/plot/json.h"

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <utility>

namespace ferry::plot {
namespace {

using nlohmann::json;

std::string Where(std::string_view origin) {
  return origin.empty() ? std::string("plot input") : std::string(origin);
}

// Parses with nlohmann's exceptions caught here: its parse_error carries line and column, which
// the non-throwing overload drops.
Result<json> Parse(std::string_view text, std::string_view origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return InvalidArgument(Where(origin) + " is not valid JSON: " + e.what());
  }
}

Status OnlyKeys(const json& obj, std::initializer_list<std::string_view> allowed,
                const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (std::string_view k : allowed) known = known || key == k;
    if (!known) return InvalidArgument(where + ": unknown key '" + key + "'");
  }
  return Status::Ok();
}

// Reads obj[key] into `out` when present; a value of the wrong type is an error.
Status GetString(const json& obj, const char* key, std::string& out, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::Ok();
  if (!it->is_string()) return InvalidArgument(where + ": '" + key + "' must be a string");
  out = it->get<std::string>();
  return Status::Ok();
}

Status GetBool(const json& obj, const char* key, bool& out, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::Ok();
  if (!it->is_boolean()) return InvalidArgument(where + ": '" + key + "' must be true or false");
  out = it->get<bool>();
  return Status::Ok();
}

Status GetInt(const json& obj, const char* key, int& out, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::Ok();
  if (!it->is_number_integer() || it->get<int64_t>() < -1 || it->get<int64_t>() > 1000000) {
    return InvalidArgument(where + ": '" + key + "' must be an integer");
  }
  out = static_cast<int>(it->get<int64_t>());
  return Status::Ok();
}

Result<Series> SeriesFromJson(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + " must be an object");
  FERRY_RETURN_IF_ERROR(OnlyKeys(j, {"name", "points", "dashed", "color"}, where));
  Series s;
  FERRY_RETURN_IF_ERROR(GetString(j, "name", s.name, where));
  FERRY_RETURN_IF_ERROR(GetBool(j, "dashed", s.dashed, where));
  FERRY_RETURN_IF_ERROR(GetInt(j, "color", s.color, where));
  auto points = j.find("points");
  if (points == j.end() || !points->is_array()) {
    return InvalidArgument(where + " needs \"points\": [[x, y], ...]");
  }
  for (size_t k = 0; k < points->size(); ++k) {
    const json& p = (*points)[k];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
      return InvalidArgument(where + ": points[" + std::to_string(k) +
                             "] is not a pair of numbers [x, y]");
    }
    s.points.emplace_back(p[0].get<double>(), p[1].get<double>());
  }
  return s;
}

const char* MetricName(Metric m) {
  switch (m) {
    case Metric::kLatency:
      return "latency";
    case Metric::kBandwidth:
      return "bandwidth";
    case Metric::kRate:
      return "rate";
    case Metric::kAuto:
      break;
  }
  return "auto";
}

// One ferry-lat / ferry-bw run, checked for what the plot reads.
struct Run {
  std::string where, label, tool, test, transport, op, latency_definition;
  json results;
};

Result<Run> ParseRun(const RunJson& in) {
  Run r;
  r.where = in.origin.empty() ? std::string("the run's results") : in.origin;
  FERRY_ASSIGN_OR_RETURN(json j, Parse(in.text, r.where));
  if (!j.is_object() || !j.contains("results")) {
    return InvalidArgument(r.where + " is not the --json output of ferry-lat or ferry-bw");
  }
  for (auto [key, out] : {std::pair{"tool", &r.tool}, std::pair{"test", &r.test},
                          std::pair{"transport", &r.transport}, std::pair{"op", &r.op},
                          std::pair{"latency_definition", &r.latency_definition}}) {
    FERRY_RETURN_IF_ERROR(GetString(j, key, *out, r.where));
  }
  if (r.test != "latency" && r.test != "bandwidth") {
    return InvalidArgument(r.where + ": \"test\" is '" + r.test +
                           "', expected latency or bandwidth");
  }
  r.results = j["results"];
  if (!r.results.is_array() || r.results.empty()) {
    return InvalidArgument(r.where + " has no results to plot");
  }
  r.label = in.label;
  if (r.label.empty()) {
    r.label = r.transport + " " + r.op;
    const json* config = j.contains("config") ? &j["config"] : nullptr;
    if (config != nullptr && config->is_object() && config->value("bidir", false) == true) {
      r.label += " bidir";
    }
  }
  return r;
}

// (bytes, row[key]) for every result row.
Result<std::vector<std::pair<double, double>>> Column(const Run& r, const char* key) {
  std::vector<std::pair<double, double>> points;
  for (size_t k = 0; k < r.results.size(); ++k) {
    const json& row = r.results[k];
    if (!row.is_object() || !row.contains("bytes") || !row["bytes"].is_number() ||
        !row.contains(key) || !row[key].is_number()) {
      return InvalidArgument(r.where + ": results[" + std::to_string(k) +
                             "] lacks a numeric 'bytes' or '" + key + "'");
    }
    points.emplace_back(row["bytes"].get<double>(), row[key].get<double>());
  }
  return points;
}

bool HasColumn(const Run& r, const char* key) {
  for (const json& row : r.results) {
    if (!row.is_object() || !row.contains(key) || !row[key].is_number()) return false;
  }
  return true;
}

}  // namespace

Result<Metric> ParseMetric(std::string_view name) {
  for (Metric m : {Metric::kAuto, Metric::kLatency, Metric::kBandwidth, Metric::kRate}) {
    if (name == MetricName(m)) return m;
  }
  return InvalidArgument("metric '" + std::string(name) +
                         "' is unknown (use latency, bandwidth, rate or auto)");
}

Result<PlotSpec> SpecFromJson(std::string_view text, std::string_view origin) {
  const std::string where = Where(origin);
  FERRY_ASSIGN_OR_RETURN(json j, Parse(text, where));
  if (!j.is_object()) return InvalidArgument(where + ": a plot spec must be a JSON object");
  FERRY_RETURN_IF_ERROR(OnlyKeys(
      j,
      {"title", "xlabel", "ylabel", "log_x", "log_y", "x_unit_format", "width", "height", "series"},
      where));
  PlotSpec spec;
  FERRY_RETURN_IF_ERROR(GetString(j, "title", spec.title, where));
  FERRY_RETURN_IF_ERROR(GetString(j, "xlabel", spec.xlabel, where));
  FERRY_RETURN_IF_ERROR(GetString(j, "ylabel", spec.ylabel, where));
  FERRY_RETURN_IF_ERROR(GetString(j, "x_unit_format", spec.x_unit_format, where));
  FERRY_RETURN_IF_ERROR(GetBool(j, "log_x", spec.log_x, where));
  FERRY_RETURN_IF_ERROR(GetBool(j, "log_y", spec.log_y, where));
  FERRY_RETURN_IF_ERROR(GetInt(j, "width", spec.width, where));
  FERRY_RETURN_IF_ERROR(GetInt(j, "height", spec.height, where));
  auto series = j.find("series");
  if (series == j.end() || !series->is_array()) {
    return InvalidArgument(where + " needs \"series\": [{\"name\": ..., \"points\": [[x, y]]}]");
  }
  for (size_t i = 0; i < series->size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(
        Series s, SeriesFromJson((*series)[i], where + ": series[" + std::to_string(i) + "]"));
    spec.series.push_back(std::move(s));
  }
  return spec;
}

Result<PlotSpec> SpecFromRuns(const std::vector<RunJson>& inputs, Metric metric) {
  if (inputs.empty()) return InvalidArgument("no results to plot");
  std::vector<Run> runs;
  for (const RunJson& in : inputs) {
    FERRY_ASSIGN_OR_RETURN(Run r, ParseRun(in));
    runs.push_back(std::move(r));
  }
  if (metric == Metric::kAuto) {
    for (const Run& r : runs) {
      if (r.test != runs.front().test) {
        return InvalidArgument(runs.front().where + " is a " + runs.front().test + " run and " +
                               r.where + " a " + r.test +
                               " run; plot them separately or pick a metric");
      }
    }
    metric = runs.front().test == "latency" ? Metric::kLatency : Metric::kBandwidth;
  }
  const std::string want = metric == Metric::kLatency ? "latency" : "bandwidth";
  for (const Run& r : runs) {
    if (r.test != want) {
      return InvalidArgument(r.where + " is a " + r.test + " run; the " + MetricName(metric) +
                             " metric needs " + (want == "latency" ? "ferry-lat" : "ferry-bw") +
                             " results");
    }
  }

  PlotSpec spec;
  spec.log_x = true;
  spec.x_unit_format = "bytes";
  spec.xlabel = "message size (bytes)";
  std::string definition = runs.front().latency_definition;
  for (const Run& r : runs) {
    if (r.latency_definition != definition) definition.clear();
  }
  switch (metric) {
    case Metric::kLatency:
      spec.log_y = true;
      spec.ylabel = definition == "round_trip"        ? "latency, µs (round trip)"
                    : definition == "half_round_trip" ? "latency, µs (half round trip)"
                                                      : "latency, µs";
      break;
    case Metric::kBandwidth:
      spec.ylabel = "bandwidth, MiB/s (average)";
      break;
    default:
      spec.ylabel = "message rate, Mpps";
      break;
  }
  const std::string what = metric == Metric::kLatency     ? "latency, median and p99"
                           : metric == Metric::kBandwidth ? "bandwidth"
                                                          : "message rate";
  const Run& first = runs.front();
  spec.title = runs.size() > 1      ? "Ferry " + what
               : first.tool.empty() ? first.label + " " + what
                                    : first.tool + ": " + first.label + " " + what;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const int color = static_cast<int>(i);
    if (metric == Metric::kLatency) {
      FERRY_ASSIGN_OR_RETURN(auto median, Column(r, "t_typical_usec"));
      spec.series.push_back({r.label + " median", std::move(median), false, color});
      if (HasColumn(r, "p99_usec")) {
        FERRY_ASSIGN_OR_RETURN(auto p99, Column(r, "p99_usec"));
        spec.series.push_back({r.label + " p99", std::move(p99), true, color});
      }
    } else {
      FERRY_ASSIGN_OR_RETURN(
          auto points, Column(r, metric == Metric::kBandwidth ? "bw_avg_mb_s" : "msg_rate_mpps"));
      spec.series.push_back({r.label, std::move(points), false, color});
    }
  }
  return spec;
}

}  // namespace ferry::plot
