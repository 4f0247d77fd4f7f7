#include "tools/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ferry::bench {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double n = static_cast<double>(sorted.size());
  // 1-based nearest rank; the epsilon keeps 99.9% of 1000 at rank 999 despite rounding.
  double rank = std::ceil(p * n / 100.0 - 1e-9);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[static_cast<size_t>(rank) - 1];
}

LatencySummary SummarizeLatency(std::vector<double>& samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.count = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  // Median: the middle sample, or the mean of the two middle ones.
  const size_t mid = samples.size() / 2;
  s.typical = samples.size() % 2 ? samples[mid] : (samples[mid - 1] + samples[mid]) / 2;
  const double sum = std::accumulate(samples.begin(), samples.end(), 0.0);
  s.avg = sum / static_cast<double>(samples.size());
  double sq = 0;
  for (double v : samples) sq += (v - s.avg) * (v - s.avg);
  s.stdev = std::sqrt(sq / static_cast<double>(samples.size()));
  s.p99 = Percentile(samples, 99.0);
  s.p999 = Percentile(samples, 99.9);
  return s;
}

BandwidthMeter::BandwidthMeter(uint64_t min_interval_ns)
    : min_interval_ns_(std::max<uint64_t>(min_interval_ns, 1)) {}

void BandwidthMeter::Start(uint64_t now_ns) {
  start_ns_ = end_ns_ = interval_start_ = now_ns;
  ops_ = bytes_ = rows_ = interval_bytes_ = 0;
  peak_ = 0;
}

void BandwidthMeter::Complete(uint64_t now_ns, uint64_t bytes, uint64_t rows) {
  interval_bytes_ += bytes;
  const uint64_t dt = now_ns - interval_start_;
  if (dt >= min_interval_ns_) {
    peak_ = std::max(peak_, static_cast<double>(interval_bytes_) * 1e9 / static_cast<double>(dt));
    interval_start_ = now_ns;
    interval_bytes_ = 0;
  }
  ++ops_;
  bytes_ += bytes;
  rows_ += rows;
  end_ns_ = now_ns;
}

double BandwidthMeter::peak_bytes_per_sec() const {
  const double secs = static_cast<double>(end_ns_ - start_ns_) / 1e9;
  const double avg = secs > 0 ? static_cast<double>(bytes_) / secs : 0;
  return std::max(peak_, avg);
}

BandwidthSummary SummarizeBandwidth(const std::vector<BandwidthMeter>& meters) {
  BandwidthSummary s;
  uint64_t start = UINT64_MAX, end = 0;
  double peak = 0;
  for (const BandwidthMeter& m : meters) {
    if (m.ops() == 0) continue;
    s.ops += m.ops();
    s.bytes += m.bytes();
    s.rows += m.rows();
    start = std::min(start, m.start_ns());
    end = std::max(end, m.end_ns());
    peak += m.peak_bytes_per_sec();
  }
  if (s.ops == 0 || end <= start) return s;
  s.seconds = static_cast<double>(end - start) / 1e9;
  s.bw_avg_mb = static_cast<double>(s.bytes) / s.seconds / kMB;
  s.bw_peak_mb = std::max(peak / kMB, s.bw_avg_mb);
  s.msg_rate_mpps = static_cast<double>(s.ops) / s.seconds / 1e6;
  s.rows_per_sec = static_cast<double>(s.rows) / s.seconds;
  return s;
}

BandwidthSummary AddBandwidth(const BandwidthSummary& a, const BandwidthSummary& b) {
  BandwidthSummary s;
  s.ops = a.ops + b.ops;
  s.bytes = a.bytes + b.bytes;
  s.rows = a.rows + b.rows;
  s.seconds = std::max(a.seconds, b.seconds);
  s.bw_peak_mb = a.bw_peak_mb + b.bw_peak_mb;
  s.bw_avg_mb = a.bw_avg_mb + b.bw_avg_mb;
  s.msg_rate_mpps = a.msg_rate_mpps + b.msg_rate_mpps;
  s.rows_per_sec = a.rows_per_sec + b.rows_per_sec;
  return s;
}

}  // namespace ferry::bench
