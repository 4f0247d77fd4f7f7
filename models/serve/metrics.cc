// ferry-serve's counters and their Prometheus rendering (metrics.h).
#include "models/serve/metrics.h"

#include <cstdio>

namespace ferry::models {

std::string_view EndpointName(Endpoint e) {
  switch (e) {
    case Endpoint::kPredict:
      return "predict";
    case Endpoint::kModel:
      return "model";
    case Endpoint::kHealth:
      return "healthz";
    case Endpoint::kMetrics:
      return "metrics";
    case Endpoint::kOther:
      break;
  }
  return "other";
}

size_t ServeMetrics::CodeIndex(int status) {
  for (size_t i = 0; i < kCodes.size(); ++i) {
    if (kCodes[i] == status) return i;
  }
  return kCodes.size();
}

void ServeMetrics::CountRequest(Endpoint e, int status) {
  requests_[static_cast<size_t>(e)][CodeIndex(status)].fetch_add(1, std::memory_order_relaxed);
}

void ServeMetrics::ObservePredict(double seconds, uint64_t instances) {
  size_t b = 0;
  while (b < kLatencyBounds.size() && seconds > kLatencyBounds[b]) ++b;
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
  latency_ns_sum_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  instances_.fetch_add(instances, std::memory_order_relaxed);
}

void ServeMetrics::SetModel(uint64_t version, double load_seconds) {
  version_.store(version, std::memory_order_relaxed);
  load_ns_.store(static_cast<uint64_t>(load_seconds * 1e9), std::memory_order_relaxed);
}

uint64_t ServeMetrics::requests(Endpoint e, int status) const {
  return requests_[static_cast<size_t>(e)][CodeIndex(status)].load(std::memory_order_relaxed);
}

std::string ServeMetrics::RenderPrometheus() const {
  std::string s;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    s += line;
  };
  // Every metric: its HELP and TYPE lines, then its samples.
  auto header = [&](const char* name, const char* type, const char* help) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto count = [&](const char* name, const char* type, const char* help, uint64_t value) {
    header(name, type, help);
    add("%s %llu\n", name, static_cast<unsigned long long>(value));
  };
  header("ferry_serve_requests_total", "counter",
         "HTTP requests answered, by endpoint and status code.");
  for (size_t e = 0; e < kEndpoints; ++e) {
    const std::string name(EndpointName(static_cast<Endpoint>(e)));
    for (size_t c = 0; c <= kCodes.size(); ++c) {
      const uint64_t n = requests_[e][c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      const std::string code = c < kCodes.size() ? std::to_string(kCodes[c]) : "other";
      add("ferry_serve_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n", name.c_str(),
          code.c_str(), static_cast<unsigned long long>(n));
    }
  }
  header("ferry_serve_errors_total", "counter", "Requests answered with a status of 400 or above.");
  for (size_t e = 0; e < kEndpoints; ++e) {
    uint64_t n = 0;
    for (size_t c = 0; c <= kCodes.size(); ++c) {
      if (c == kCodes.size() || kCodes[c] >= 400)
        n += requests_[e][c].load(std::memory_order_relaxed);
    }
    add("ferry_serve_errors_total{endpoint=\"%s\"} %llu\n",
        std::string(EndpointName(static_cast<Endpoint>(e))).c_str(),
        static_cast<unsigned long long>(n));
  }
  count("ferry_serve_instances_total", "counter", "Instances scored.",
        instances_.load(std::memory_order_relaxed));
  header("ferry_serve_predict_seconds", "histogram", "Predict latency: decode, score, encode.");
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= kLatencyBounds.size(); ++b) {
    cumulative += buckets_[b].load(std::memory_order_relaxed);
    if (b < kLatencyBounds.size()) {
      add("ferry_serve_predict_seconds_bucket{le=\"%g\"} %llu\n", kLatencyBounds[b],
          static_cast<unsigned long long>(cumulative));
    } else {
      add("ferry_serve_predict_seconds_bucket{le=\"+Inf\"} %llu\n",
          static_cast<unsigned long long>(cumulative));
    }
  }
  add("ferry_serve_predict_seconds_sum %.9f\n",
      static_cast<double>(latency_ns_sum_.load(std::memory_order_relaxed)) * 1e-9);
  add("ferry_serve_predict_seconds_count %llu\n", static_cast<unsigned long long>(cumulative));
  count("ferry_serve_model_version", "gauge", "The model version serving new requests.",
        version_.load(std::memory_order_relaxed));
  count("ferry_serve_model_swaps_total", "counter", "Versions swapped in after the first.",
        swaps());
  count("ferry_serve_model_load_failures_total", "counter",
        "Versions refused (corrupt, truncated, inconsistent).", load_failures());
  header("ferry_serve_model_load_seconds", "gauge", "How long the last version took to load.");
  add("ferry_serve_model_load_seconds %.6f\n",
      static_cast<double>(load_ns_.load(std::memory_order_relaxed)) * 1e-9);
  return s;
}

}  // namespace ferry::models
