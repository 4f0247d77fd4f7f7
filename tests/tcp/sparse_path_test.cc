// The sparse fast paths of the tcp backend: iovec merging of segments adjacent in memory
// (Cursor::Fill), the target's bounce receive for small rows (ShouldBounce, Cursor::CopyIn), and
// the target checks still refusing out-of-bounds rows, before any byte lands, on those paths.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/tcp/tcp_test_util.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp::testing {
namespace {

TEST(TcpSparsePath, FillMergesOnlySegmentsThatTouch) {
  std::vector<uint8_t> mem(1024);
  // local: [0,8) [8,16) touch; [32,40) does not; zero-length in between; [40,48) touches [32,40).
  std::vector<Segment> segs = {{0, 0, 8}, {8, 0, 8}, {32, 0, 8}, {99, 0, 0}, {40, 0, 8}};
  Cursor c;
  c.SetSegments(mem.data(), segs.data(), segs.size(), false, 32);
  iovec iov[8];
  uint64_t bytes = 0;
  ASSERT_EQ(c.Fill(iov, 8, &bytes), 2u);
  EXPECT_EQ(bytes, 32u);
  EXPECT_EQ(iov[0].iov_base, mem.data());
  EXPECT_EQ(iov[0].iov_len, 16u);
  EXPECT_EQ(iov[1].iov_base, mem.data() + 32);
  EXPECT_EQ(iov[1].iov_len, 16u);
  // After 12 bytes the cursor sits inside segment 1; the merged run restarts there.
  c.Advance(12);
  bytes = 0;
  ASSERT_EQ(c.Fill(iov, 8, &bytes), 2u);
  EXPECT_EQ(bytes, 20u);
  EXPECT_EQ(iov[0].iov_base, mem.data() + 12);
  EXPECT_EQ(iov[0].iov_len, 4u);
  // max bounds the iovec count, not the segment count: a merged run continues past max.
  c.SetSegments(mem.data(), segs.data(), segs.size(), false, 32);
  bytes = 0;
  ASSERT_EQ(c.Fill(iov, 1, &bytes), 1u);
  EXPECT_EQ(iov[0].iov_len, 16u);
  EXPECT_EQ(bytes, 16u);
  // Remote side uses remote offsets: these do not touch, so nothing merges.
  std::vector<Segment> rsegs = {{0, 100, 4}, {4, 50, 4}, {8, 54, 4}};
  c.SetSegments(mem.data(), rsegs.data(), rsegs.size(), true, 12);
  bytes = 0;
  ASSERT_EQ(c.Fill(iov, 8, &bytes), 2u);
  EXPECT_EQ(iov[0].iov_base, mem.data() + 100);
  EXPECT_EQ(iov[1].iov_base, mem.data() + 50);
  EXPECT_EQ(iov[1].iov_len, 8u);
}

// Fill memoizes its first merged run: after any Advance, the iovecs must equal those of a fresh
// cursor at the same position (runs of touching rows, zero-length rows, breaks, odd advances,
// Fill limited to few iovecs, and CopyIn moving the cursor between Fills).
TEST(TcpSparsePath, FillMemoMatchesAFreshWalk) {
  std::mt19937_64 rng(17);
  std::vector<uint8_t> mem(1 << 20);
  for (int round = 0; round < 20; ++round) {
    std::vector<Segment> segs;
    uint64_t at = 0, total = 0;
    for (int k = 0; k < 3000; ++k) {
      const uint64_t len = rng() % 9 == 0 ? 0 : 1 + rng() % 64;
      if (rng() % 50 == 0) at += 1 + rng() % 100;  // a break: the next row does not touch
      if (at + len > mem.size()) break;
      segs.push_back({at, 0, len});
      at += len;
      total += len;
    }
    Cursor c, fresh;
    c.SetSegments(mem.data(), segs.data(), segs.size(), false, total);
    std::vector<uint8_t> sink(total);
    uint64_t done = 0;
    while (done < total) {
      const size_t max = 1 + rng() % 4;
      iovec a[4], b[4];
      uint64_t ab = 0, bb = 0;
      const size_t na = c.Fill(a, max, &ab);
      fresh.SetSegments(mem.data(), segs.data(), segs.size(), false, total);
      fresh.Advance(done);
      const size_t nb = fresh.Fill(b, max, &bb);
      ASSERT_EQ(na, nb) << "round " << round << " done " << done;
      ASSERT_EQ(ab, bb) << "round " << round << " done " << done;
      for (size_t k = 0; k < na; ++k) {
        ASSERT_EQ(a[k].iov_base, b[k].iov_base) << k;
        ASSERT_EQ(a[k].iov_len, b[k].iov_len) << k;
      }
      const uint64_t n = std::min<uint64_t>(total - done, 1 + rng() % (ab + 1));
      if (rng() % 5 == 0) {
        c.CopyIn(sink.data(), n);  // moves the cursor without Fill
      } else {
        c.Advance(n);
      }
      done += n;
    }
    EXPECT_EQ(c.remaining, 0u);
  }
}

TEST(TcpSparsePath, CopyInScattersAcrossChunkAndSegmentBoundaries) {
  std::mt19937_64 rng(5);
  constexpr size_t kRows = 300;
  std::vector<Segment> segs(kRows);
  std::vector<uint64_t> slots(kRows);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  uint64_t total = 0;
  for (size_t i = 0; i < kRows; ++i) {
    const uint64_t len = rng() % 4 == 0 ? 0 : 1 + rng() % 40;
    segs[i] = {total, slots[i] * 40, len};
    total += len;
  }
  std::vector<uint8_t> src(total), dst(kRows * 40, 0), want(kRows * 40, 0);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  for (const Segment& s : segs)
    std::memcpy(want.data() + s.remote_offset, &src[s.local_offset], s.length);
  Cursor c;
  c.SetSegments(dst.data(), segs.data(), segs.size(), true, total);
  uint64_t done = 0;
  while (done < total) {  // odd chunk sizes split rows anywhere
    const uint64_t n = std::min<uint64_t>(total - done, 1 + rng() % 97);
    c.CopyIn(src.data() + done, n);
    done += n;
  }
  EXPECT_EQ(c.remaining, 0u);
  EXPECT_EQ(dst, want);
}

TEST(TcpSparsePath, BounceThresholdBoundaries) {
  EXPECT_TRUE(ShouldBounce(64 * 10, 10, 64));   // average == threshold
  EXPECT_FALSE(ShouldBounce(65 * 10, 10, 64));  // just above
  EXPECT_TRUE(ShouldBounce(649, 10, 64));       // integer average 64
  EXPECT_FALSE(ShouldBounce(64, 1, 64));        // one row: readv is one iovec anyway
  EXPECT_FALSE(ShouldBounce(64 * 10, 10, 0));   // disabled
  EXPECT_TRUE(ShouldBounce(0, 10, 64));         // all rows empty: harmless
  EXPECT_TRUE(ShouldBounce(1ull << 40, 2, ~0ull));
}

// The initiator's choice counts runs of touching source rows, not rows: packed rows are one
// run (one iovec) whatever their number.
TEST(TcpSparsePath, SourceGatherCountsRunsOfTouchingRows) {
  std::vector<Segment> packed, scattered, pairs;
  for (uint64_t i = 0; i < 10; ++i) {
    packed.push_back({i * 64, i * 4096, 64});
    scattered.push_back({i * 128, i * 4096, 64});
    pairs.push_back({(i / 2) * 256 + (i % 2) * 64, i * 4096, 64});  // runs of 128 B
  }
  EXPECT_FALSE(ShouldGatherSource(packed.data(), packed.size(), 640, 512));
  EXPECT_TRUE(ShouldGatherSource(scattered.data(), scattered.size(), 640, 512));
  EXPECT_TRUE(ShouldGatherSource(scattered.data(), scattered.size(), 640, 64));
  EXPECT_FALSE(ShouldGatherSource(scattered.data(), scattered.size(), 640, 63));
  EXPECT_FALSE(ShouldGatherSource(scattered.data(), scattered.size(), 640, 0));  // disabled
  EXPECT_TRUE(ShouldGatherSource(pairs.data(), pairs.size(), 640, 128));
  EXPECT_FALSE(ShouldGatherSource(pairs.data(), pairs.size(), 640, 127));
  EXPECT_FALSE(ShouldGatherSource(scattered.data(), 1, 64, 512));  // one row: one iovec
}

// The defaults docs/architecture.md ("Copies, per backend") states, decided by the same function:
// the target of a sparse write receives through the scratch buffer when its rows average at most
// 16 KiB, the target of a sparse read gathers its reply when they average at most 512 B. The
// average decides, not the largest row. Change both together.
TEST(TcpSparsePath, DefaultThresholdsAsDocumented) {
  EXPECT_EQ(kDefaultBounceMaxRow, 16384u);
  EXPECT_EQ(kDefaultGatherMaxRow, 512u);
  EXPECT_TRUE(ShouldBounce(16384 * 4, 4, kDefaultBounceMaxRow));
  EXPECT_FALSE(ShouldBounce(16385 * 4, 4, kDefaultBounceMaxRow));
  EXPECT_FALSE(ShouldBounce(64, 1, kDefaultBounceMaxRow));  // one row: straight in
  EXPECT_TRUE(ShouldBounce(512 * 4, 4, kDefaultGatherMaxRow));
  EXPECT_FALSE(ShouldBounce(513 * 4, 4, kDefaultGatherMaxRow));
  EXPECT_TRUE(ShouldBounce(100 + 900, 2, kDefaultGatherMaxRow));  // a 900 B row, average 500
}

// Sparse writes of `rows` rows of `row` bytes into a permutation of slots (with every 7th row
// adjacent to the previous one), then a sparse read of the same rows back, through a transport
// pair configured with bounce_max_row = gather_max_row = max. Packed source rows (local offsets
// i * row) are sent as one run; scattered ones (every other slot of a buffer twice the size,
// every 5th row touching the previous one) are gathered by the initiator below the threshold.
void SparseRoundTrip(uint64_t max, uint64_t row, size_t rows, bool scattered_source = false) {
  SCOPED_TRACE("bounce_max_row=gather_max_row=" + std::to_string(max) +
               " row=" + std::to_string(row) + " rows=" + std::to_string(rows) +
               (scattered_source ? " scattered source" : " packed source"));
  TransportOptions o;
  o.params["bounce_max_row"] = std::to_string(max);
  o.params["gather_max_row"] = std::to_string(max);
  Pair p = ConnectPair(o, o);
  ASSERT_NE(p.ab, nullptr);
  std::mt19937_64 rng(row * 131 + rows);
  const size_t slots_n = rows * 2;
  std::vector<uint64_t> slots(slots_n);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<Segment> segs(rows);
  for (size_t i = 0; i < rows; ++i) {
    uint64_t slot = slots[i];
    if (i % 7 == 6 && segs[i - 1].remote_offset / row + 1 < slots_n) {
      slot = segs[i - 1].remote_offset / row + 1;  // may collide with another row: still defined
    }
    const uint64_t local = !scattered_source ? i * row
                           : i % 5 == 4      ? segs[i - 1].local_offset + row
                                             : 2 * i * row;
    segs[i] = {local, slot * row, row};
  }
  const size_t src_rows = scattered_source ? 2 * rows : rows;
  EXPECT_EQ(ShouldGatherSource(segs.data(), segs.size(), rows * row, max),
            scattered_source && rows > 1 && max > 0 && row * 5 / 4 <= max);
  std::vector<uint8_t> src(src_rows * row), dst(slots_n * row, 0xee);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> want = dst;  // rows land in order, so a later duplicate slot wins
  for (const Segment& s : segs) std::memcpy(&want[s.remote_offset], &src[s.local_offset], row);
  auto src_mr = Take(p.a->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemote));
  auto key = Take(p.ab->Import(dst_mr->descriptor()));
  Op w = MakeOp(OpType::kSparseWrite, p.ab.get(), src_mr.get(), 0, 0, 1, key.get());
  w.segments = segs.data();
  w.num_segments = segs.size();
  ASSERT_TRUE(p.a->Post({&w, 1}).ok());
  Driver d({p.a.get(), p.b.get()});
  auto c = d.Next(0);
  ASSERT_TRUE(c && c->ok()) << (c ? c->error : "timeout");
  EXPECT_EQ(c->bytes, rows * row);
  EXPECT_TRUE(dst == want);
  // Back: each row from where it landed (a duplicate slot holds the later row).
  std::vector<uint8_t> back(src_rows * row, 0), back_want(src_rows * row, 0);
  for (const Segment& s : segs)
    std::memcpy(&back_want[s.local_offset], &want[s.remote_offset], row);
  auto back_mr = Take(p.a->RegisterMemory(back.data(), back.size(), kAccessLocal));
  Op r = MakeOp(OpType::kSparseRead, p.ab.get(), back_mr.get(), 0, 0, 2, key.get());
  r.segments = segs.data();
  r.num_segments = segs.size();
  ASSERT_TRUE(p.a->Post({&r, 1}).ok());
  c = d.Next(0);
  ASSERT_TRUE(c && c->ok()) << (c ? c->error : "timeout");
  EXPECT_EQ(c->bytes, rows * row);
  EXPECT_TRUE(back == back_want);
}

TEST(TcpSparsePath, WritesAndReadsLandOnEitherSideOfTheThreshold) {
  for (uint64_t max : {0ull, 64ull, 1ull << 20}) {
    for (uint64_t row : {1ull, 63ull, 64ull, 65ull, 300ull}) {
      for (bool scattered : {false, true}) {
        SparseRoundTrip(max, row, 3000, scattered);  // > one 64 KiB chunk for rows >= 22 B
      }
    }
    for (uint64_t row : {20000ull, 100000ull}) {  // rows near and above the 64 KiB scratch
      SparseRoundTrip(max, row, 40);
    }
  }
}

// A sparse write whose local rows merge into runs longer than Cursor::Fill takes at once
// (kFillBytes), with another write queued behind it: the send gather must stop at the first
// item it could not take whole, or the next frame's header goes out inside this one's payload
// and the target reads garbage as a frame ("unknown frame kind", found by perf/compare/run.sh).
TEST(TcpSparsePath, MergedRunsLongerThanOneFillKeepTheStreamInSync) {
  Pair p = ConnectPair();
  ASSERT_NE(p.ab, nullptr);
  constexpr uint64_t kRow = 256;
  constexpr size_t kRows = 3 * kFillBytes / kRow;  // 24 MiB, local rows contiguous
  std::vector<uint8_t> src(kRows * kRow + 4096), dst(kRows * kRow + 4096, 0);
  std::mt19937_64 rng(11);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  auto src_mr = Take(p.a->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemote));
  auto key = Take(p.ab->Import(dst_mr->descriptor()));
  std::vector<Segment> segs(kRows);
  for (size_t i = 0; i < kRows; ++i) segs[i] = {i * kRow, (kRows - 1 - i) * kRow, kRow};
  Op ops[2];
  ops[0] = MakeOp(OpType::kSparseWrite, p.ab.get(), src_mr.get(), 0, 0, 1, key.get());
  ops[0].segments = segs.data();
  ops[0].num_segments = segs.size();
  ops[1] = MakeOp(OpType::kWrite, p.ab.get(), src_mr.get(), kRows * kRow, 4096, 2, key.get(),
                  kRows * kRow);
  ASSERT_TRUE(p.a->Post({ops, 2}).ok());
  Driver d({p.a.get(), p.b.get()});
  for (int i = 0; i < 2; ++i) {
    auto c = d.Next(0);
    ASSERT_TRUE(c && c->ok()) << (c ? c->error : "timeout");
  }
  for (size_t i = 0; i < kRows; i += 997) {
    ASSERT_EQ(0, std::memcmp(&dst[(kRows - 1 - i) * kRow], &src[i * kRow], kRow)) << "row " << i;
  }
  EXPECT_EQ(0, std::memcmp(&dst[kRows * kRow], &src[kRows * kRow], 4096));
  EXPECT_TRUE(p.ab->status().ok());
}

TEST(TcpSparsePath, BouncedWriteWithOneBadRowIsRefusedBeforeAnyByteLands) {
  TransportOptions o;
  o.params["bounce_max_row"] = "4096";
  Pair p = ConnectPair(o, o);
  ASSERT_NE(p.ab, nullptr);
  constexpr uint64_t kRow = 64;
  constexpr size_t kRows = 4000;  // ~4 bounce chunks of payload to drain
  std::vector<uint8_t> src(kRows * kRow, 0x5a), dst(kRows * kRow, 0), before;
  auto src_mr = Take(p.a->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemote));
  RemoteRegion forged_region = dst_mr->descriptor();
  forged_region.length =
      1ull << 60;  // the initiator's own bounds check is fooled; the target's not
  auto key = Take(p.ab->Import(forged_region));
  Driver d({p.a.get(), p.b.get()});
  std::vector<Segment> segs(kRows);
  for (size_t i = 0; i < kRows; ++i) segs[i] = {i * kRow, (kRows - 1 - i) * kRow, kRow};
  before = dst;
  for (const Segment bad : {Segment{0, kRows * kRow - 8, kRow}, Segment{0, 1ull << 50, kRow}}) {
    std::vector<Segment> forged = segs;
    forged[kRows / 2] = bad;  // the middle row only: the ones before it are valid
    Op w = MakeOp(OpType::kSparseWrite, p.ab.get(), src_mr.get(), 0, 0, 7, key.get());
    w.segments = forged.data();
    w.num_segments = forged.size();
    ASSERT_TRUE(p.a->Post({&w, 1}).ok());
    auto c = d.Next(0);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->code, Code::kOutOfRange) << c->error;
    EXPECT_NE(c->error.find("segment " + std::to_string(kRows / 2)), std::string::npos) << c->error;
    EXPECT_TRUE(dst == before) << "a refused sparse write changed target memory";
    EXPECT_TRUE(p.ab->status().ok());
  }
  // The stream stayed in sync: a valid write right after lands completely.
  Op w = MakeOp(OpType::kSparseWrite, p.ab.get(), src_mr.get(), 0, 0, 8, key.get());
  w.segments = segs.data();
  w.num_segments = segs.size();
  ASSERT_TRUE(p.a->Post({&w, 1}).ok());
  auto c = d.Next(0);
  ASSERT_TRUE(c && c->ok()) << (c ? c->error : "timeout");
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0x5a; }));
}

TEST(TcpSparsePath, BadBounceOrGatherParameterIsInvalidArgument) {
  for (const char* name : {"bounce_max_row", "gather_max_row"}) {
    TransportOptions o;
    o.params[name] = "lots";
    auto t = CreateTransport("tcp", o);
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << name;
    EXPECT_NE(t.status().message().find(name), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace ferry::tcp::testing
