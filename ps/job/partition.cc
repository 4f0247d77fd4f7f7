// Consistent-hash ring construction and the bucket table (see partition.h).
#include "ps/job/partition.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "ps/store/mix.h"

namespace ferry::ps {
namespace {

// Point positions, independent of KeyHash: splitmix64's step (the golden-ratio increment, then
// its finaliser).
uint64_t PointMix(uint64_t x) {
  return SplitMix64Finalize(x + 0x9e3779b97f4a7c15ull);
}

}  // namespace

Result<Partition> Partition::Create(uint32_t servers, uint32_t virtual_nodes, uint64_t seed) {
  if (servers == 0 || servers > kMaxServers) {
    return InvalidArgument("partition: server count " + std::to_string(servers) + " must be 1.." +
                           std::to_string(kMaxServers));
  }
  if (virtual_nodes == 0 || virtual_nodes > 4096) {
    return InvalidArgument("partition: virtual nodes per server must be 1..4096, not " +
                           std::to_string(virtual_nodes));
  }
  Partition p;
  p.servers_ = servers;
  p.virtual_nodes_ = virtual_nodes;
  p.seed_ = seed;
  p.version_ = PointMix(PointMix(PointMix(seed) ^ servers) ^ (uint64_t{virtual_nodes} << 20));
  struct Point {
    uint64_t pos;
    uint32_t owner;
  };
  std::vector<Point> ring;
  ring.reserve(static_cast<size_t>(servers) * virtual_nodes);
  for (uint32_t s = 0; s < servers; ++s) {
    for (uint32_t v = 0; v < virtual_nodes; ++v) {
      // A server's points depend only on (seed, s, v): adding server S leaves servers 0..S-1's
      // points where they were, which is what makes the hashing consistent.
      ring.push_back({PointMix(seed ^ PointMix((uint64_t{s} << 32) | v)), s});
    }
  }
  // Ties (astronomically unlikely) resolve by owner so every process builds the same ring.
  std::sort(ring.begin(), ring.end(), [](const Point& a, const Point& b) {
    return a.pos != b.pos ? a.pos < b.pos : a.owner < b.owner;
  });
  p.points_.reserve(ring.size());
  p.owners_.reserve(ring.size());
  for (const Point& pt : ring) {
    p.points_.push_back(pt.pos);
    p.owners_.push_back(pt.owner);
  }
  constexpr size_t kBuckets = size_t{1} << kBucketBits;
  p.buckets_.resize(kBuckets);
  size_t i = 0;  // first point >= the current bucket's start
  for (size_t b = 0; b < kBuckets; ++b) {
    const uint64_t start = static_cast<uint64_t>(b) << (64 - kBucketBits);
    const uint64_t last = start | ((uint64_t{1} << (64 - kBucketBits)) - 1);
    while (i < p.points_.size() && p.points_[i] < start) ++i;
    if (i < p.points_.size() && p.points_[i] <= last) {
      p.buckets_[b] = kMixed | static_cast<uint32_t>(i);
    } else {
      p.buckets_[b] = i == p.points_.size() ? p.owners_[0] : p.owners_[i];
    }
  }
  return p;
}

std::vector<double> Partition::Shares() const {
  std::vector<double> share(servers_, 0.0);
  if (points_.empty()) return share;
  if (points_.size() == 1) {
    share[owners_[0]] = 1.0;
    return share;
  }
  constexpr double kRing = 18446744073709551616.0;  // 2^64
  for (size_t i = 0; i < points_.size(); ++i) {
    // Arc (points_[i-1], points_[i]] belongs to owners_[i]; the first arc wraps around.
    const uint64_t prev = i == 0 ? points_.back() : points_[i - 1];
    share[owners_[i]] += static_cast<double>(points_[i] - prev) / kRing;  // wraps mod 2^64
  }
  return share;
}

}  // namespace ferry::ps
