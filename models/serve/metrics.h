// ferry-serve's counters, rendered in Prometheus' text exposition format (version 0.0.4) for
// GET /metrics:
//
//   ferry_serve_requests_total{endpoint="predict",code="200"}   every request, by answer
//   ferry_serve_errors_total{endpoint="predict"}                 answers of 400 and above
//   ferry_serve_instances_total                                  instances scored
//   ferry_serve_predict_seconds_bucket{le="..."} / _sum / _count  predict latency (decode, score,
//                                                                 encode), a histogram
//   ferry_serve_model_version, ferry_serve_model_swaps_total,
//   ferry_serve_model_load_failures_total, ferry_serve_model_load_seconds (the last load)
//
// Thread-safety: every method may be called from any thread at once (relaxed atomics; a scrape
// sees each counter at some moment, not all at one moment). Never blocks, never allocates on
// the recording side.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::models {

enum class Endpoint : uint8_t { kPredict, kModel, kHealth, kMetrics, kOther };
inline constexpr size_t kEndpoints = 5;
std::string_view EndpointName(Endpoint e);

// Upper bounds of the latency histogram's buckets, seconds (then +Inf).
inline constexpr std::array<double, 14> kLatencyBounds = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

class ServeMetrics {
 public:
  void CountRequest(Endpoint e, int status);
  void ObservePredict(double seconds, uint64_t instances);
  void SetModel(uint64_t version, double load_seconds);
  void CountSwap() { swaps_.fetch_add(1, std::memory_order_relaxed); }
  void CountLoadFailure() { load_failures_.fetch_add(1, std::memory_order_relaxed); }

  uint64_t requests(Endpoint e, int status) const;
  uint64_t swaps() const { return swaps_.load(std::memory_order_relaxed); }
  uint64_t load_failures() const { return load_failures_.load(std::memory_order_relaxed); }

  std::string RenderPrometheus() const;

 private:
  // The answers counted apart; anything else is counted as "other".
  static constexpr std::array<int, 7> kCodes = {200, 400, 404, 405, 413, 500, 503};
  static size_t CodeIndex(int status);
  std::array<std::array<std::atomic<uint64_t>, kCodes.size() + 1>, kEndpoints> requests_{};
  std::array<std::atomic<uint64_t>, kLatencyBounds.size() + 1> buckets_{};  // not cumulative
  std::atomic<uint64_t> latency_ns_sum_{0};
  std::atomic<uint64_t> instances_{0};
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> load_ns_{0};
  std::atomic<uint64_t> swaps_{0};
  std::atomic<uint64_t> load_failures_{0};
};

}  // namespace ferry::models
