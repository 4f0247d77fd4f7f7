// Partition: which server owns a 64-bit feature id. Consistent hashing with virtual nodes
// (OSDI'14 parameter server): every server owns `virtual_nodes` points on a 64-bit ring, and a
// key belongs to the server of the first point at or after the key's hash (wrapping around).
// When the server count changes, only the keys on the arcs that changed hands move: about
// 1/S of them for one added server, not all of them as with `hash % S`.
//
// Versioned: version() fingerprints (servers, virtual_nodes, seed); two rings with the same
// version place every key identically. A checkpoint records the version it was written under,
// and a restart under a different ring moves rows to their new owners (server.cc).
//
// Lookup is O(1) for almost every key: the ring's 2^16 top-bit buckets are precomputed; a bucket
// holding no point maps straight to its owner, and only the few buckets that contain a point
// search their handful of points.
//
// The key hash is independent of ArrayHashMap's index hash (a different mixer and seed), so the
// keys one server owns still spread evenly over that server's index buckets.
//
// Thread-safety: immutable after Create; const calls from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/status.h"

namespace ferry::ps {

class Partition {
 public:
  static constexpr uint32_t kDefaultVirtualNodes = 128;
  static constexpr uint32_t kMaxServers = 1u << 16;

  Partition() = default;
  // kInvalidArgument if servers is 0 or above kMaxServers, or virtual_nodes is 0.
  static Result<Partition> Create(uint32_t servers, uint32_t virtual_nodes = kDefaultVirtualNodes,
                                  uint64_t seed = 0);

  uint32_t ServerOf(uint64_t key) const {
    const uint64_t h = KeyHash(key);
    const uint32_t e = buckets_[h >> (64 - kBucketBits)];
    if ((e & kMixed) == 0) return e;
    // The bucket holds ring points: the first point >= h from the bucket's first point on.
    size_t i = e & ~kMixed;
    while (i < points_.size() && points_[i] < h) ++i;
    return i == points_.size() ? owners_[0] : owners_[i];
  }

  uint32_t servers() const { return servers_; }
  uint32_t virtual_nodes() const { return virtual_nodes_; }
  uint64_t seed() const { return seed_; }
  uint64_t version() const { return version_; }
  // The share of the hash space each server owns (sums to 1), for tests and docs.
  std::vector<double> Shares() const;

  static uint64_t KeyHash(uint64_t key) {
    // murmur3's fmix64 with a fixed salt: a bijection, so distinct keys never collide.
    uint64_t h = key ^ 0x9e3779b97f4a7c15ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
  }

 private:
  static constexpr int kBucketBits = 16;
  static constexpr uint32_t kMixed = 0x80000000u;

  uint32_t servers_ = 0;
  uint32_t virtual_nodes_ = 0;
  uint64_t seed_ = 0;
  uint64_t version_ = 0;
  std::vector<uint64_t> points_;  // sorted ring points
  std::vector<uint32_t> owners_;  // owners_[i] owns the arc ending at points_[i]
  // Per top-bit bucket: the owner, or kMixed | index of the bucket's first point.
  std::vector<uint32_t> buckets_;
};

}  // namespace ferry::ps
