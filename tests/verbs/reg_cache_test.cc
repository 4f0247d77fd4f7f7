// Registration cache (transport/verbs/reg_cache.h): hits, no idle reuse outside published
// mappings, invalidation on withdrawal (with a data check that the new pages move), eviction,
// remote-access regions never cached, reg_cache=off. Linked into verbs_test (needs rxe: run
// under tools/softroce/ferry-vm); the timing case prints cache on/off figures and asserts
// counters only.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/verbs/verbs_test_util.h"
#include "transport/pool.h"
#include "transport/transport.h"
#include "transport/verbs/verbs_transport.h"

namespace ferry {
namespace {

using std::chrono::steady_clock;
using Params = std::map<std::string, std::string>;

TransportOptions WithParams(Params p) {
  TransportOptions o;
  o.params = std::move(p);
  return o;
}

std::unique_ptr<Transport> Make(Params p = {}) {
  auto t = CreateTransport("verbs", WithParams(std::move(p)));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

verbs::RegCacheStats CacheStats(const Transport& t) {
  return *verbs::VerbsRegCacheStats(t);
}

uint32_t Lkey(const std::unique_ptr<MemoryRegion>& r) {
  return static_cast<const verbs::VerbsMemoryRegion*>(r.get())->lkey();
}

std::unique_ptr<MemoryRegion> Register(Transport* t, void* p, size_t n, uint32_t access) {
  auto r = t->RegisterMemory(p, n, access);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

void Pattern(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 9));
}

using Connected = verbs_test::TransportPair;

Connected ConnectPair(Params client_params = {}) {
  Connected p;
  p.server = Make();
  p.client = Make(std::move(client_params));
  if (p.server && p.client) verbs_test::ConnectTransports(&p, "127.0.0.1");
  return p;
}

// Posts one op on `t` and returns its completion (polling `other` too, for two-sided ops).
Completion RunOp(Transport* t, const Op& op, Transport* other = nullptr) {
  Status st = t->Post({&op, 1});
  EXPECT_TRUE(st.ok()) << st.ToString();
  const auto deadline = steady_clock::now() + std::chrono::seconds(30);
  Completion c[4];
  while (steady_clock::now() < deadline) {
    if (other != nullptr) (void)other->Poll({c + 2, 2});
    if (t->Poll({c, 1}) == 1) return c[0];
    (void)t->Wait(Millis(1));
  }
  Completion timeout;
  timeout.code = Code::kTimeout;
  timeout.error = "no completion within 30 s";
  return timeout;
}

// WRITE local[0, n) of `region` to the server's `remote` region and check the bytes arrived.
void WriteAndCheck(Connected& p, const MemoryRegion& local, const MemoryRegion& remote, size_t n,
                   const char* what) {
  auto key = p.c_ep->Import(remote.descriptor());
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  std::memset(remote.data(), 0, n);
  Op w{.type = OpType::kWrite,
       .ep = p.c_ep.get(),
       .local = &local,
       .length = n,
       .remote = key->get()};
  Completion c = RunOp(p.client.get(), w);
  ASSERT_TRUE(c.ok()) << what << ": " << c.error;
  EXPECT_EQ(std::memcmp(remote.data(), local.data(), n), 0) << what << ": wrong bytes arrived";
}

// The withdrawal listeners of transport.h (no device needed): called with the withdrawn
// mapping's range, only for published mappings, never after removal.
TEST(RegCacheListener, CalledOnWithdrawalOnlyAndNotAfterRemoval) {
  std::vector<std::pair<const void*, size_t>> seen;
  const uint64_t id = AddMappingWithdrawnListener(
      [&](const void* addr, size_t length) { seen.emplace_back(addr, length); });
  ASSERT_GT(id, 0u);
  auto m = ShareableMemory::Allocate(3 * 4096);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  uint8_t* const data = m->data();
  WithdrawShareableMapping(data + 4096);  // not a published start: nothing withdrawn
  EXPECT_TRUE(seen.empty());
  m->Reset();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, data);
  EXPECT_EQ(seen[0].second, 3u * 4096);
  WithdrawShareableMapping(data);  // already withdrawn: no second call
  EXPECT_EQ(seen.size(), 1u);
  RemoveMappingWithdrawnListener(id);
  auto m2 = ShareableMemory::Allocate(4096);
  ASSERT_TRUE(m2.ok());
  m2->Reset();
  EXPECT_EQ(seen.size(), 1u) << "a removed listener was called";
}

TEST(RegCache, SameRangeTwiceWhileLiveHitsAndSubRangeHits) {
  REQUIRE_RDMA();
  auto t = Make();
  ASSERT_TRUE(t);
  std::vector<uint8_t> buf(64 << 10);
  auto r1 = Register(t.get(), buf.data(), buf.size(), kAccessLocal);
  auto r2 = Register(t.get(), buf.data(), buf.size(), kAccessLocal);
  auto sub = Register(t.get(), buf.data() + 4097, 1000, kAccessLocal);
  ASSERT_TRUE(r1 && r2 && sub);
  auto s = CacheStats(*t);
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.live_entries, 1u);
  EXPECT_EQ(Lkey(r1), Lkey(r2));
  EXPECT_EQ(Lkey(r1), Lkey(sub));
  EXPECT_EQ(sub->data(), buf.data() + 4097);
  EXPECT_EQ(sub->size(), 1000u);

  // Plain heap memory: once the last region is gone the entry is gone (no idle reuse).
  const uint64_t pinned_live = s.memlock_bytes;
  r1.reset();
  r2.reset();
  EXPECT_EQ(CacheStats(*t).live_entries, 1u);
  sub.reset();
  s = CacheStats(*t);
  EXPECT_EQ(s.live_entries, 0u);
  EXPECT_EQ(s.idle_entries, 0u);
  EXPECT_EQ(s.idle_bytes, 0u);
  EXPECT_LT(s.memlock_bytes, pinned_live) << "the entry's pages are still charged";
  auto again = Register(t.get(), buf.data(), buf.size(), kAccessLocal);
  ASSERT_TRUE(again);
  EXPECT_EQ(CacheStats(*t).misses, 2u);
  EXPECT_EQ(CacheStats(*t).hits, 2u);

  // A wider range is not inside the live entry: a miss with its own MR.
  std::vector<uint8_t> big(256 << 10);
  auto narrow = Register(t.get(), big.data() + 8192, 8192, kAccessLocal);
  auto wide = Register(t.get(), big.data(), big.size(), kAccessLocal);
  ASSERT_TRUE(narrow && wide);
  EXPECT_EQ(CacheStats(*t).misses, 4u);
  EXPECT_NE(Lkey(narrow), Lkey(wide));
}

TEST(RegCache, PublishedMappingKeepsIdleEntryUntilWithdrawn) {
  REQUIRE_RDMA();
  Connected p = ConnectPair();
  ASSERT_TRUE(p.c_ep && p.s_ep);
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> target(kBytes);
  auto remote = Register(p.server.get(), target.data(), target.size(), kAccessRemoteWrite);
  ASSERT_TRUE(remote);

  auto m1 = ShareableMemory::Allocate(kBytes);
  ASSERT_TRUE(m1.ok()) << m1.status().ToString();
  uint8_t* const first_address = m1->data();
  Pattern(m1->data(), kBytes, 1);
  const auto base = CacheStats(*p.client);
  auto r = Register(p.client.get(), m1->data(), kBytes, kAccessLocal);
  ASSERT_TRUE(r);
  const uint32_t lkey = Lkey(r);
  r.reset();
  auto s = CacheStats(*p.client);
  EXPECT_EQ(s.idle_entries, 1u) << "a published mapping's entry should stay idle";
  EXPECT_EQ(s.idle_bytes, kBytes);
  r = Register(p.client.get(), m1->data(), kBytes, kAccessLocal);
  ASSERT_TRUE(r);
  s = CacheStats(*p.client);
  EXPECT_EQ(s.misses - base.misses, 1u);
  EXPECT_EQ(s.hits - base.hits, 1u);
  EXPECT_EQ(Lkey(r), lkey);
  WriteAndCheck(p, *r, *remote, kBytes, "first mapping");
  // A sub-range of the idle entry hits too, and moves the right bytes.
  r.reset();
  auto sub = Register(p.client.get(), m1->data() + 12345, 50000, kAccessLocal);
  ASSERT_TRUE(sub);
  EXPECT_EQ(CacheStats(*p.client).hits - base.hits, 2u);
  {
    auto key = p.c_ep->Import(remote->descriptor());
    ASSERT_TRUE(key.ok());
    Op w{.type = OpType::kWrite,
         .ep = p.c_ep.get(),
         .local = sub.get(),
         .local_offset = 5,
         .length = 40000,
         .remote = key->get(),
         .remote_offset = 77};
    Completion c = RunOp(p.client.get(), w);
    ASSERT_TRUE(c.ok()) << c.error;
    EXPECT_EQ(std::memcmp(target.data() + 77, m1->data() + 12345 + 5, 40000), 0);
  }
  sub.reset();

  // Withdrawing the mapping (ShareableMemory::Reset withdraws, then unmaps) drops the idle entry.
  m1->Reset();
  s = CacheStats(*p.client);
  EXPECT_EQ(s.invalidations - base.invalidations, 1u);
  EXPECT_EQ(s.idle_entries, 0u);
  EXPECT_EQ(s.idle_bytes, 0u);
  EXPECT_EQ(s.memlock_bytes, base.memlock_bytes) << "invalidated entry still charged";

  // A new mapping, likely at the same address: a miss, and a WRITE carries the NEW bytes (a
  // stale MR would still point at the old pages, which hold pattern 1).
  auto m2 = ShareableMemory::Allocate(kBytes);
  ASSERT_TRUE(m2.ok());
  std::cerr << "new mapping " << (m2->data() == first_address ? "reuses" : "does not reuse")
            << " the withdrawn mapping's address\n";
  Pattern(m2->data(), kBytes, 2);
  auto r2 = Register(p.client.get(), m2->data(), kBytes, kAccessLocal);
  ASSERT_TRUE(r2);
  EXPECT_EQ(CacheStats(*p.client).misses - base.misses, 2u);
  WriteAndCheck(p, *r2, *remote, kBytes, "second mapping");

  // Withdrawn while a region is live: the entry is doomed, never leased again, and deregistered
  // when that region goes.
  uint8_t* const m2_data = m2->data();
  const uint64_t misses_before = CacheStats(*p.client).misses;
  WithdrawShareableMapping(m2_data);
  EXPECT_EQ(CacheStats(*p.client).invalidations - base.invalidations, 2u);
  auto r3 = Register(p.client.get(), m2_data, kBytes, kAccessLocal);
  ASSERT_TRUE(r3);
  EXPECT_EQ(CacheStats(*p.client).misses, misses_before + 1) << "a doomed entry was leased";
  EXPECT_NE(Lkey(r3), Lkey(r2));
  r2.reset();
  r3.reset();  // not published any more: dropped at once
  s = CacheStats(*p.client);
  EXPECT_EQ(s.live_entries, 0u);
  EXPECT_EQ(s.idle_entries, 0u);
  EXPECT_EQ(s.memlock_bytes, base.memlock_bytes);
  PublishShareableMapping(m2_data, m2->size(), m2->fd(), 0);  // m2's destructor withdraws it
}

TEST(RegCache, SendFromCachedRegionCarriesTheBytes) {
  REQUIRE_RDMA();
  Connected p = ConnectPair();
  ASSERT_TRUE(p.c_ep && p.s_ep);
  auto m = ShareableMemory::Allocate(64 << 10);
  ASSERT_TRUE(m.ok());
  std::vector<uint8_t> rbuf(20000);
  auto rmr = Register(p.server.get(), rbuf.data(), rbuf.size(), kAccessLocal);
  for (uint8_t round = 0; round < 3; ++round) {
    Pattern(m->data(), m->size(), static_cast<uint8_t>(10 + round));
    auto smr = Register(p.client.get(), m->data() + 1000, 20000, kAccessLocal);
    ASSERT_TRUE(smr && rmr);
    Op recv{.type = OpType::kRecv, .ep = nullptr, .local = rmr.get(), .length = 20000};
    ASSERT_TRUE(p.server->Post({&recv, 1}).ok());
    Op send{.type = OpType::kSend, .ep = p.c_ep.get(), .local = smr.get(), .length = 20000};
    Completion c = RunOp(p.client.get(), send);
    ASSERT_TRUE(c.ok()) << c.error;
    Completion rc;
    const auto deadline = steady_clock::now() + std::chrono::seconds(30);
    while (p.server->Poll({&rc, 1}) == 0 && steady_clock::now() < deadline) {
      (void)p.server->Wait(Millis(1));
    }
    ASSERT_TRUE(rc.ok()) << rc.error;
    EXPECT_EQ(std::memcmp(rbuf.data(), m->data() + 1000, 20000), 0) << "round " << int{round};
  }
  const auto s = CacheStats(*p.client);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 2u);
}

TEST(RegCache, EvictionBeyondMaxBytesReleasesMemlock) {
  REQUIRE_RDMA();
  constexpr size_t kMiB = 1 << 20;
  auto t = Make({{"reg_cache_max_bytes", std::to_string(2 * kMiB)}});
  ASSERT_TRUE(t);
  auto m = ShareableMemory::Allocate(4 * kMiB);
  ASSERT_TRUE(m.ok());
  const auto base = CacheStats(*t);
  for (int i = 0; i < 4; ++i) {
    auto r = Register(t.get(), m->data() + i * kMiB, kMiB, kAccessLocal);
    ASSERT_TRUE(r);
    EXPECT_EQ(CacheStats(*t).memlock_bytes, base.memlock_bytes + std::min(i + 1, 3) * kMiB);
  }
  auto s = CacheStats(*t);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.idle_entries, 2u);
  EXPECT_EQ(s.idle_bytes, 2 * kMiB);
  EXPECT_EQ(s.memlock_bytes, base.memlock_bytes + 2 * kMiB) << "evicted entries still charged";
  // Least recently used went first: ranges 0 and 1 miss, 2 and 3 hit.
  auto r3 = Register(t.get(), m->data() + 3 * kMiB, kMiB, kAccessLocal);
  auto r2 = Register(t.get(), m->data() + 2 * kMiB, kMiB, kAccessLocal);
  EXPECT_EQ(CacheStats(*t).hits, 2u);
  auto r0 = Register(t.get(), m->data(), kMiB, kAccessLocal);
  EXPECT_EQ(CacheStats(*t).misses, 5u);
  r0.reset();
  r2.reset();
  r3.reset();
  EXPECT_LE(CacheStats(*t).idle_bytes, 2 * kMiB);

  // A range larger than the whole idle budget is never kept.
  auto big = Register(t.get(), m->data(), 3 * kMiB, kAccessLocal);
  ASSERT_TRUE(big);
  big.reset();
  s = CacheStats(*t);
  EXPECT_LE(s.idle_bytes, 2 * kMiB);
  EXPECT_EQ(s.memlock_bytes, base.memlock_bytes + s.idle_bytes);
  // Destroying the transport deregisters the idle entries first (else the PD stays busy; the
  // process would leak it silently, so this only checks nothing crashes).
  t.reset();
}

// A registration that would pass RLIMIT_MEMLOCK first evicts idle entries instead of failing.
TEST(RegCache, MemlockLimitEvictsIdleEntriesFirst) {
  REQUIRE_RDMA();
  constexpr size_t kMiB = 1 << 20;
  auto t = Make();
  ASSERT_TRUE(t);
  auto m = ShareableMemory::Allocate(3 * kMiB);
  ASSERT_TRUE(m.ok());
  for (int i = 0; i < 2; ++i) {
    auto r = Register(t.get(), m->data() + i * kMiB, kMiB, kAccessLocal);
    ASSERT_TRUE(r);
  }
  ASSERT_EQ(CacheStats(*t).idle_bytes, 2 * kMiB);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &old), 0);
  rlimit low = old;
  // Room for 1.5 MiB more: a new 2 MiB registration fits only once the idle 2 MiB are gone.
  low.rlim_cur = CacheStats(*t).memlock_bytes + kMiB + kMiB / 2;
  if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < low.rlim_cur) {
    GTEST_SKIP() << "RLIMIT_MEMLOCK is already below what the case needs";
  }
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &low), 0);
  // [0.5, 2.5) MiB lies inside neither idle entry: a miss that needs the idle entries' budget.
  auto fits = t->RegisterMemory(m->data() + kMiB / 2, 2 * kMiB, kAccessLocal);
  const auto s = CacheStats(*t);
  auto too_big = t->RegisterMemory(m->data(), 3 * kMiB, kAccessLocal);
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &old), 0);
  ASSERT_TRUE(fits.ok()) << "idle entries were not evicted to make room: "
                         << fits.status().ToString();
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.idle_bytes, 0u);
  ASSERT_FALSE(too_big.ok()) << "3 MiB more than the limit allows was registered";
  EXPECT_EQ(too_big.status().code(), Code::kResourceExhausted) << too_big.status().ToString();
  EXPECT_NE(too_big.status().message().find("ulimit -l"), std::string::npos);
}

// Remote-access regions keep their own MR: destroying one revokes its key at the HCA.
TEST(RegCache, RemoteAccessRegionsAreNeverCached) {
  REQUIRE_RDMA();
  Connected p = ConnectPair();
  ASSERT_TRUE(p.c_ep && p.s_ep);
  auto m = ShareableMemory::Allocate(64 << 10);  // published: would be kept idle if cached
  ASSERT_TRUE(m.ok());
  std::vector<uint8_t> src(4096);
  Pattern(src.data(), src.size(), 5);
  auto lmr = Register(p.client.get(), src.data(), src.size(), kAccessLocal);
  auto rmr = Register(p.server.get(), m->data(), m->size(), kAccessRemote);
  auto rmr2 = Register(p.server.get(), m->data(), m->size(), kAccessRemote);
  ASSERT_TRUE(lmr && rmr && rmr2);
  EXPECT_NE(Lkey(rmr), Lkey(rmr2)) << "remote-access registrations shared an MR";
  auto s = CacheStats(*p.server);
  EXPECT_EQ(s.hits + s.misses, 0u);
  const RemoteRegion old = rmr->descriptor();
  rmr2.reset();
  rmr.reset();
  s = CacheStats(*p.server);
  EXPECT_EQ(s.idle_entries + s.live_entries, 0u);
  auto key = p.c_ep->Import(old);
  ASSERT_TRUE(key.ok());
  Op w{.type = OpType::kWrite,
       .ep = p.c_ep.get(),
       .local = lmr.get(),
       .length = 4096,
       .remote = key->get()};
  std::memset(m->data(), 0, 4096);
  Completion c = RunOp(p.client.get(), w);
  EXPECT_EQ(c.code, Code::kPermissionDenied) << "write through a deregistered key: " << c.error;
  std::vector<uint8_t> zero(4096, 0);
  EXPECT_EQ(std::memcmp(m->data(), zero.data(), 4096), 0) << "bytes landed through an old key";
}

TEST(RegCache, OffBehavesAsBefore) {
  REQUIRE_RDMA();
  Connected p = ConnectPair({{"reg_cache", "off"}});
  ASSERT_TRUE(p.c_ep && p.s_ep);
  auto m = ShareableMemory::Allocate(64 << 10);
  ASSERT_TRUE(m.ok());
  Pattern(m->data(), m->size(), 9);
  auto r1 = Register(p.client.get(), m->data(), m->size(), kAccessLocal);
  auto r2 = Register(p.client.get(), m->data(), m->size(), kAccessLocal);
  ASSERT_TRUE(r1 && r2);
  EXPECT_NE(Lkey(r1), Lkey(r2));
  auto s = CacheStats(*p.client);
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.hits + s.misses, 0u);
  std::vector<uint8_t> target(m->size());
  auto remote = Register(p.server.get(), target.data(), target.size(), kAccessRemoteWrite);
  ASSERT_TRUE(remote);
  WriteAndCheck(p, *r2, *remote, m->size(), "cache off");
  const uint64_t pinned = s.memlock_bytes;
  r1.reset();
  r2.reset();
  EXPECT_EQ(CacheStats(*p.client).memlock_bytes, pinned - 2 * m->size());

  for (const char* bad : {"yes", "ON", ""}) {
    auto t = CreateTransport("verbs", WithParams({{"reg_cache", bad}}));
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find("reg_cache"), std::string::npos);
  }
  auto t = CreateTransport("verbs", WithParams({{"reg_cache_max_bytes", "lots"}}));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
}

// Several threads register, release and withdraw concurrently; the counters must balance.
TEST(RegCache, ConcurrentRegisterReleaseAndWithdraw) {
  REQUIRE_RDMA();
  auto t = Make();
  ASSERT_TRUE(t);
  const uint64_t pinned0 = CacheStats(*t).memlock_bytes;
  std::atomic<bool> failed{false};
  auto worker = [&](int id) {
    for (int i = 0; i < 40 && !failed; ++i) {
      auto m = ShareableMemory::Allocate(256 << 10);
      if (!m.ok()) {
        failed = true;
        return;
      }
      std::vector<uint8_t> heap(8192 + id);
      for (int k = 0; k < 5; ++k) {
        auto a = t->RegisterMemory(m->data() + k * 4096, 64 << 10, kAccessLocal);
        auto a_sub = t->RegisterMemory(m->data() + k * 4096 + 100, 4000, kAccessLocal);  // hit
        auto b = t->RegisterMemory(heap.data(), heap.size(), kAccessLocal);
        if (!a.ok() || !a_sub.ok() || !b.ok()) failed = true;
      }
      // m's destructor withdraws while the other threads work on their own mappings.
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back(worker, i);
  for (auto& th : threads) th.join();
  EXPECT_FALSE(failed);
  auto s = CacheStats(*t);
  EXPECT_EQ(s.live_entries, 0u);
  EXPECT_EQ(s.idle_entries, 0u) << "every mapping was withdrawn";
  EXPECT_EQ(s.memlock_bytes, pinned0);
  EXPECT_GT(s.hits, 0u);
  EXPECT_GT(s.invalidations, 0u);
}

// Not a performance assertion: prints register+destroy cost with the cache on and off, measured
// side by side (alternating), and checks only that the cache really served the repeats.
TEST(RegCache, TimingRegisterDestroyOneMiB) {
  REQUIRE_RDMA();
  constexpr int kCycles = 1000;
  constexpr size_t kBytes = 1 << 20;
  auto on = Make();
  auto off = Make({{"reg_cache", "off"}});
  ASSERT_TRUE(on && off);
  auto m = ShareableMemory::Allocate(kBytes);
  ASSERT_TRUE(m.ok());
  std::memset(m->data(), 1, kBytes);  // fault the pages in once, outside the timing
  auto cycle = [&](Transport* t) {
    const auto start = steady_clock::now();
    for (int i = 0; i < kCycles; ++i) {
      auto r = t->RegisterMemory(m->data(), kBytes, kAccessLocal);
      if (!r.ok()) {
        ADD_FAILURE() << r.status().ToString();
        break;
      }
    }
    return std::chrono::duration<double, std::micro>(steady_clock::now() - start).count() / kCycles;
  };
  for (int round = 0; round < 3; ++round) {
    const double us_on = cycle(on.get());
    const double us_off = cycle(off.get());
    std::cerr << "reg_cache timing round " << round << ": 1 MiB register+destroy, " << kCycles
              << " cycles: cache on " << us_on << " us/cycle, off " << us_off
              << " us/cycle, off/on = " << us_off / us_on << "\n";
  }
  const auto s = CacheStats(*on);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 3u * kCycles - 1);
}

}  // namespace
}  // namespace ferry
