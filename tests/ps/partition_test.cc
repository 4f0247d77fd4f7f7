// Consistent hashing (ps/job/partition.h): range, determinism, balance, movement when a server
// joins, versions, and the O(1) bucket lookup against a brute-force walk of the ring.
#include "ps/job/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace ferry::ps {
namespace {

Partition Make(uint32_t servers, uint32_t vnodes = Partition::kDefaultVirtualNodes,
               uint64_t seed = 0) {
  auto p = Partition::Create(servers, vnodes, seed);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(p).value() : Partition();
}

std::vector<uint64_t> RandomKeys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = rng();
  return keys;
}

TEST(Partition, CreateRefusesBadShapes) {
  for (auto [s, v] : {std::pair<uint32_t, uint32_t>{0, 128},
                      {Partition::kMaxServers + 1, 128},
                      {4, 0},
                      {4, 4097}}) {
    auto p = Partition::Create(s, v);
    ASSERT_FALSE(p.ok()) << s << " servers, " << v << " vnodes";
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  }
  EXPECT_TRUE(Partition::Create(1, 1).ok());
  EXPECT_TRUE(Partition::Create(3, 4096).ok());
}

TEST(Partition, EveryKeyMapsToAServerDeterministically) {
  const auto keys = RandomKeys(200000, 1);
  for (uint32_t servers : {1u, 2u, 3u, 7u, 16u, 100u}) {
    Partition a = Make(servers, 128, 5);
    Partition b = Make(servers, 128, 5);  // another process building the same ring
    EXPECT_EQ(a.version(), b.version());
    std::vector<uint64_t> seen(servers, 0);
    for (uint64_t k : keys) {
      const uint32_t s = a.ServerOf(k);
      ASSERT_LT(s, servers) << "key " << k;
      ASSERT_EQ(s, b.ServerOf(k)) << "key " << k;
      ++seen[s];
    }
    for (uint32_t s = 0; s < servers; ++s) EXPECT_GT(seen[s], 0u) << "server " << s << " idle";
    // Small, structured keys (feature ids are often dense) map as well.
    for (uint64_t k = 0; k < 10000; ++k) ASSERT_LT(a.ServerOf(k), servers);
    ASSERT_LT(a.ServerOf(UINT64_MAX), servers);
  }
}

TEST(Partition, VersionFollowsTheShape) {
  const uint64_t base = Make(8, 128, 0).version();
  EXPECT_EQ(base, Make(8, 128, 0).version());
  EXPECT_NE(base, Make(9, 128, 0).version());
  EXPECT_NE(base, Make(8, 64, 0).version());
  EXPECT_NE(base, Make(8, 128, 1).version());
  // Distinct shapes give distinct versions (no accidental collisions among neighbours).
  std::vector<uint64_t> versions;
  for (uint32_t s = 1; s <= 20; ++s) {
    for (uint32_t v : {1u, 16u, 128u, 129u}) {
      for (uint64_t seed : {0ull, 1ull, 0x100000ull})
        versions.push_back(Make(s, v, seed).version());
    }
  }
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(std::adjacent_find(versions.begin(), versions.end()), versions.end());
}

TEST(Partition, SharesAreBalancedAndMatchTheKeys) {
  const auto keys = RandomKeys(1000000, 2);
  for (uint32_t servers : {2u, 4u, 8u, 16u}) {
    Partition p = Make(servers);
    const std::vector<double> shares = p.Shares();
    ASSERT_EQ(shares.size(), servers);
    double total = 0;
    for (double s : shares) total += s;
    EXPECT_NEAR(total, 1.0, 1e-9);
    std::vector<double> counted(servers, 0);
    for (uint64_t k : keys) counted[p.ServerOf(k)] += 1.0 / keys.size();
    const double fair = 1.0 / servers;
    for (uint32_t s = 0; s < servers; ++s) {
      // 128 points per server: a share's spread is about fair / sqrt(128), ~9% of it.
      EXPECT_GT(shares[s], 0.7 * fair) << servers << " servers, server " << s;
      EXPECT_LT(shares[s], 1.3 * fair) << servers << " servers, server " << s;
      // The keys follow the arcs.
      EXPECT_NEAR(counted[s], shares[s], 0.004) << servers << " servers, server " << s;
    }
  }
  // One server owns everything; one point owns everything.
  ASSERT_EQ(Make(1).Shares().size(), 1u);
  EXPECT_NEAR(Make(1).Shares()[0], 1.0, 1e-12);
  EXPECT_EQ(Make(1, 1).Shares(), std::vector<double>{1.0});
}

TEST(Partition, AddingAServerMovesAboutOneInSPlusOneKeysAllToIt) {
  const auto keys = RandomKeys(1000000, 3);
  for (uint32_t servers : {1u, 3u, 8u, 15u}) {
    Partition before = Make(servers, 128, 9);
    Partition after = Make(servers + 1, 128, 9);
    size_t moved = 0;
    for (uint64_t k : keys) {
      const uint32_t a = before.ServerOf(k), b = after.ServerOf(k);
      if (a == b) continue;
      ++moved;
      ASSERT_EQ(b, servers) << "key " << k << " moved from server " << a << " to " << b
                            << ", not to the new server";
    }
    const double frac = static_cast<double>(moved) / keys.size();
    const double fair = 1.0 / (servers + 1);
    EXPECT_GT(frac, 0.7 * fair) << servers << " -> " << servers + 1;
    EXPECT_LT(frac, 1.3 * fair) << servers << " -> " << servers + 1;
    EXPECT_NEAR(frac, after.Shares()[servers], 0.004);
  }
}

// ---- Brute force ------------------------------------------------------------------------------
//
// The ring rebuilt from the construction partition.cc documents (server s's point v sits at
// Mix(seed ^ Mix(s << 32 | v)), splitmix64's finaliser; ties by owner), walked with a plain
// binary search: checks the bucket table and the wrap-around of the O(1) lookup.

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Ring {
  std::vector<std::pair<uint64_t, uint32_t>> points;  // (position, owner), sorted
  uint32_t OwnerOfHash(uint64_t h) const {
    auto it = std::lower_bound(points.begin(), points.end(), std::make_pair(h, uint32_t{0}));
    return it == points.end() ? points.front().second : it->second;
  }
};

Ring BruteRing(uint32_t servers, uint32_t vnodes, uint64_t seed) {
  Ring r;
  for (uint32_t s = 0; s < servers; ++s) {
    for (uint32_t v = 0; v < vnodes; ++v) {
      r.points.emplace_back(SplitMix(seed ^ SplitMix((uint64_t{s} << 32) | v)), s);
    }
  }
  std::sort(r.points.begin(), r.points.end());
  return r;
}

uint64_t InverseOdd(uint64_t c) {  // c * InverseOdd(c) == 1 mod 2^64 (Newton)
  uint64_t y = c;
  for (int i = 0; i < 6; ++i) y *= 2 - c * y;
  return y;
}

// The key whose KeyHash is h (KeyHash is a bijection).
uint64_t KeyWithHash(uint64_t h) {
  uint64_t x = h;
  x ^= x >> 33;
  x *= InverseOdd(0xc4ceb9fe1a85ec53ull);
  x ^= x >> 33;
  x *= InverseOdd(0xff51afd7ed558ccdull);
  x ^= x >> 33;
  return x ^ 0x9e3779b97f4a7c15ull;
}

TEST(Partition, ServerOfAgreesWithABruteForceRingWalk) {
  ASSERT_EQ(Partition::KeyHash(KeyWithHash(12345)), 12345u);
  const auto keys = RandomKeys(300000, 4);
  for (uint32_t servers : {1u, 3u, 8u, 100u}) {
    for (uint32_t vnodes : {1u, 7u, 128u}) {
      for (uint64_t seed : {0ull, 0xabcdefull}) {
        Partition p = Make(servers, vnodes, seed);
        Ring ring = BruteRing(servers, vnodes, seed);
        for (uint64_t k : keys) {
          ASSERT_EQ(p.ServerOf(k), ring.OwnerOfHash(Partition::KeyHash(k)))
              << servers << "/" << vnodes << "/" << seed << " key " << k;
        }
        // Hashes on, just before and just after every point, and the ends of the hash space.
        std::vector<uint64_t> hashes = {0,
                                        1,
                                        UINT64_MAX,
                                        UINT64_MAX - 1,
                                        uint64_t{1} << 63,
                                        (uint64_t{1} << 48) - 1,
                                        uint64_t{1} << 48};
        for (const auto& [pos, owner] : ring.points) {
          hashes.push_back(pos);
          hashes.push_back(pos - 1);
          hashes.push_back(pos + 1);
          // The edges of the point's top-bit bucket.
          hashes.push_back(pos & ~((uint64_t{1} << 48) - 1));
          hashes.push_back(pos | ((uint64_t{1} << 48) - 1));
        }
        for (uint64_t h : hashes) {
          ASSERT_EQ(p.ServerOf(KeyWithHash(h)), ring.OwnerOfHash(h))
              << servers << "/" << vnodes << "/" << seed << " hash " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ferry::ps
