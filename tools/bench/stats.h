// Statistics of benchmark measurements: latency summaries (perftest's columns) and a bandwidth
// meter that tracks the average and the peak over a sliding window of completions.
//
// Thread-safety: value types; one meter per thread, merged afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::bench {

// perftest's latency columns, in microseconds. `typical` is the median.
struct LatencySummary {
  uint64_t count = 0;
  double min = 0, max = 0, typical = 0, avg = 0, stdev = 0, p99 = 0, p999 = 0;
};

// Nearest-rank percentile (p in [0, 100]) of an ascending, non-empty vector: the smallest sample
// such that at least p% of the samples are <= it.
double Percentile(const std::vector<double>& sorted, double p);

// Summarises samples (any order; sorted in place). Empty input gives an all-zero summary.
LatencySummary SummarizeLatency(std::vector<double>& samples);

// Counts completions of a streaming run. The peak is the best rate over consecutive intervals of
// at least `min_interval_ns` (completions reaped in a burst would otherwise fake absurd rates);
// it is never below the average, and equals it for runs shorter than one interval.
class BandwidthMeter {
 public:
  explicit BandwidthMeter(uint64_t min_interval_ns = 10'000'000);
  void Start(uint64_t now_ns);
  // One operation of `bytes` (and `rows` sparse rows) finished at `now_ns`.
  void Complete(uint64_t now_ns, uint64_t bytes, uint64_t rows = 0);

  uint64_t ops() const { return ops_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t rows() const { return rows_; }
  uint64_t start_ns() const { return start_ns_; }
  uint64_t end_ns() const { return end_ns_; }
  double peak_bytes_per_sec() const;

 private:
  uint64_t min_interval_ns_;
  uint64_t interval_start_ = 0;
  uint64_t interval_bytes_ = 0;
  uint64_t start_ns_ = 0, end_ns_ = 0;
  uint64_t ops_ = 0, bytes_ = 0, rows_ = 0;
  double peak_ = 0;
};

// Aggregate of several meters (endpoints, threads, directions) run side by side.
struct BandwidthSummary {
  uint64_t ops = 0, bytes = 0, rows = 0;
  double seconds = 0;
  double bw_peak_mb = 0;    // MB/sec, MB = 2^20 bytes as perftest prints it
  double bw_avg_mb = 0;
  double msg_rate_mpps = 0;
  double rows_per_sec = 0;
};
// Average over the union interval [min start, max end]; peak = sum of the meters' peaks capped
// below by the average (meters run concurrently).
BandwidthSummary SummarizeBandwidth(const std::vector<BandwidthMeter>& meters);
// Adds a summary measured elsewhere (the peer's direction of a bidirectional run).
BandwidthSummary AddBandwidth(const BandwidthSummary& a, const BandwidthSummary& b);

inline constexpr double kMB = 1024.0 * 1024.0;

}  // namespace ferry::bench
