// RegisteredPool over a fake transport: size classes, reuse, growth, exhaustion, threads.
#include "transport/pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tests/common/fake_transport.h"

namespace ferry {
namespace {

using testing::FakeTransport;

PoolOptions Small() {
  PoolOptions o;
  o.chunk_bytes = 256u << 10;
  o.initial_bytes = 256u << 10;
  o.max_bytes = 1u << 20;
  o.min_class = 64;
  o.max_class = 64u << 10;
  return o;
}

// The block lies inside its registered region, at the offset it claims.
void ExpectInsideRegion(const Buffer& b) {
  ASSERT_TRUE(b);
  ASSERT_NE(b.region(), nullptr);
  EXPECT_EQ(b.region()->data() + b.offset(), b.data());
  EXPECT_LE(b.offset() + b.capacity(), b.region()->size());
}

TEST(RegisteredPool, RegistersOnceUpFront) {
  FakeTransport t;
  auto pool = RegisteredPool::Create(t, Small());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(t.registrations, 1);
  PoolStats s = (*pool)->stats();
  EXPECT_EQ(s.registered_bytes, 256u << 10);
  EXPECT_EQ(s.chunks, 1u);
  {
    std::vector<Buffer> bufs;
    for (int i = 0; i < 100; ++i) {
      auto b = (*pool)->Allocate(100);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      bufs.push_back(std::move(b).value());
    }
    EXPECT_EQ(t.registrations, 1);  // nothing registered on the allocation path
    EXPECT_EQ((*pool)->stats().buffers_in_use, 100u);
  }
  EXPECT_EQ((*pool)->stats().buffers_in_use, 0u);
  EXPECT_EQ((*pool)->stats().bytes_in_use, 0u);
  pool->reset();
  EXPECT_EQ(t.live_regions, 0);  // the pool deregisters its chunks
}

TEST(RegisteredPool, SizeClassesArePowersOfTwoAndAligned) {
  FakeTransport t;
  auto pool = RegisteredPool::Create(t, Small());
  ASSERT_TRUE(pool.ok());
  struct Case {
    size_t ask, capacity;
  };
  for (Case c : {Case{1, 64}, Case{64, 64}, Case{65, 128}, Case{4096, 4096}, Case{4097, 8192},
                 Case{64u << 10, 64u << 10}}) {
    auto b = (*pool)->Allocate(c.ask);
    ASSERT_TRUE(b.ok()) << c.ask;
    EXPECT_EQ(b->capacity(), c.capacity) << c.ask;
    ExpectInsideRegion(*b);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % std::min<size_t>(c.capacity, 4096), 0u);
    std::memset(b->data(), 0xab, b->capacity());  // the whole capacity is usable
  }
}

TEST(RegisteredPool, RejectsBadSizesAndOptions) {
  FakeTransport t;
  auto pool = RegisteredPool::Create(t, Small());
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->Allocate(0).status().code(), Code::kInvalidArgument);
  auto big = (*pool)->Allocate((64u << 10) + 1);
  EXPECT_EQ(big.status().code(), Code::kInvalidArgument);
  EXPECT_NE(big.status().message().find("max_class"), std::string::npos);

  PoolOptions o = Small();
  o.min_class = 48;
  EXPECT_EQ(RegisteredPool::Create(t, o).status().code(), Code::kInvalidArgument);
  o = Small();
  o.max_class = o.chunk_bytes * 2;
  EXPECT_EQ(RegisteredPool::Create(t, o).status().code(), Code::kInvalidArgument);
  o = Small();
  o.max_bytes = o.chunk_bytes - 1;
  EXPECT_EQ(RegisteredPool::Create(t, o).status().code(), Code::kInvalidArgument);
  o = Small();
  o.access = 0x80;
  EXPECT_EQ(RegisteredPool::Create(t, o).status().code(), Code::kInvalidArgument);
}

TEST(RegisteredPool, FreedBlockIsReusedFirst) {
  FakeTransport t;
  auto pool = RegisteredPool::Create(t, Small());
  ASSERT_TRUE(pool.ok());
  auto a = (*pool)->Allocate(1000);
  ASSERT_TRUE(a.ok());
  uint8_t* first = a->data();
  uint64_t offset = a->offset();
  a->Reset();
  EXPECT_FALSE(*a);
  auto b = (*pool)->Allocate(900);  // same class (1024)
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(b->offset(), offset);
  // Moving transfers ownership; only one return happens.
  Buffer moved = std::move(b).value();
  Buffer again;
  again = std::move(moved);
  EXPECT_FALSE(moved);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ((*pool)->stats().buffers_in_use, 1u);
  again.Reset();
  EXPECT_EQ((*pool)->stats().buffers_in_use, 0u);
}

TEST(RegisteredPool, LiveBlocksNeverOverlap) {
  FakeTransport t;
  auto pool = RegisteredPool::Create(t, Small());
  ASSERT_TRUE(pool.ok());
  std::mt19937 rng(7);
  std::vector<Buffer> live;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      live.erase(live.begin() + static_cast<long>(rng() % live.size()));
      continue;
    }
    size_t size = 1 + rng() % 8192;
    auto b = (*pool)->Allocate(size);
    if (!b.ok()) {
      ASSERT_EQ(b.status().code(), Code::kResourceExhausted) << b.status().ToString();
      live.clear();
      continue;
    }
    ExpectInsideRegion(*b);
    live.push_back(std::move(b).value());
    // Check pairwise disjointness of the live set now and then (quadratic, so not every time).
    if (i % 97 == 0) {
      std::vector<std::pair<uintptr_t, uintptr_t>> spans;
      for (auto& l : live) {
        auto p = reinterpret_cast<uintptr_t>(l.data());
        spans.emplace_back(p, p + l.capacity());
      }
      std::sort(spans.begin(), spans.end());
      for (size_t k = 1; k < spans.size(); ++k) ASSERT_LE(spans[k - 1].second, spans[k].first);
    }
  }
}

TEST(RegisteredPool, GrowsThenExhaustsWithAClearMessage) {
  FakeTransport t;
  PoolOptions o = Small();  // 256 KiB chunks, at most 1 MiB
  auto pool = RegisteredPool::Create(t, o);
  ASSERT_TRUE(pool.ok());
  std::vector<Buffer> held;
  Status last;
  for (int i = 0; i < 100; ++i) {
    auto b = (*pool)->Allocate(64u << 10);
    if (!b.ok()) {
      last = b.status();
      break;
    }
    held.push_back(std::move(b).value());
  }
  EXPECT_EQ(held.size(), 16u);  // 1 MiB / 64 KiB
  EXPECT_EQ(t.registrations, 4);
  EXPECT_EQ(last.code(), Code::kResourceExhausted);
  EXPECT_NE(last.message().find("max_bytes"), std::string::npos) << last.ToString();
  EXPECT_EQ((*pool)->stats().registered_bytes, 1u << 20);
  EXPECT_EQ((*pool)->regions().size(), 4u);
  // Freeing one makes room again, without registering.
  held.pop_back();
  auto again = (*pool)->Allocate(60000);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(t.registrations, 4);
}

TEST(RegisteredPool, RegistrationFailureIsReturned) {
  FakeTransport t;
  t.fail_registrations_after = 1;
  auto pool = RegisteredPool::Create(t, Small());
  ASSERT_TRUE(pool.ok());
  std::vector<Buffer> held;
  Status last;
  for (int i = 0; i < 10; ++i) {
    auto b = (*pool)->Allocate(64u << 10);
    if (!b.ok()) {
      last = b.status();
      break;
    }
    held.push_back(std::move(b).value());
  }
  EXPECT_EQ(held.size(), 4u);
  EXPECT_EQ(last.code(), Code::kResourceExhausted);
  EXPECT_NE(last.message().find("registering a chunk"), std::string::npos) << last.ToString();
  PoolOptions o = Small();
  FakeTransport refusing;
  refusing.fail_registrations_after = 0;
  EXPECT_FALSE(RegisteredPool::Create(refusing, o).ok());
}

TEST(RegisteredPool, HugePageOptionGivesAlignedChunks) {
  FakeTransport t;
  PoolOptions o = Small();
  o.huge_pages = true;  // chunk rounded up to 2 MiB; MAP_HUGETLB if reserved, else THP-aligned
  o.max_bytes = 4u << 20;
  auto pool = RegisteredPool::Create(t, o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ((*pool)->options().chunk_bytes, 2u << 20);
  auto regions = (*pool)->regions();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(regions[0]->data()) % (2u << 20), 0u);
  auto b = (*pool)->Allocate(4096);
  ASSERT_TRUE(b.ok());
  std::memset(b->data(), 1, 4096);
}

TEST(RegisteredPool, ConcurrentAllocateAndFree) {
  FakeTransport t;
  PoolOptions o = Small();
  o.max_bytes = 16u << 20;
  auto pool = RegisteredPool::Create(t, o);
  ASSERT_TRUE(pool.ok());
  constexpr int kThreads = 4;
  constexpr int kIters = 20000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937 rng(static_cast<unsigned>(th));
      std::vector<Buffer> mine;
      for (int i = 0; i < kIters; ++i) {
        if (mine.size() > 32 || (!mine.empty() && rng() % 2 == 0)) {
          Buffer& b = mine[rng() % mine.size()];
          // The pattern we wrote must still be there: nobody else got this block.
          if (b.data()[0] != static_cast<uint8_t>(th) ||
              b.data()[b.capacity() - 1] != static_cast<uint8_t>(th)) {
            ++failures;
          }
          std::swap(b, mine.back());
          mine.pop_back();
          continue;
        }
        auto b = (*pool)->Allocate(1 + rng() % 4096);
        if (!b.ok()) {
          ++failures;
          continue;
        }
        b->data()[0] = static_cast<uint8_t>(th);
        b->data()[b->capacity() - 1] = static_cast<uint8_t>(th);
        mine.push_back(std::move(b).value());
      }
      // Hand the rest to another thread to free (cross-thread release).
      std::thread([v = std::move(mine)]() mutable { v.clear(); }).join();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ((*pool)->stats().buffers_in_use, 0u);
  EXPECT_EQ((*pool)->stats().bytes_in_use, 0u);
}

}  // namespace
}  // namespace ferry
