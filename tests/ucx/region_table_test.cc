// The region table that gives path (1) (same host, cross-memory attach) its target-side checks:
// the table itself (publish, remove, full, torn-read freedom, a peer that is gone) and the
// transport refusing stale, forged and out-of-bounds descriptors on the CMA path without
// touching memory.
#include "transport/samehost/region_table.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "ps/store/mapped_buffer.h"
#include "tests/common/ops.h"
#include "tests/ucx/ucx_test_util.h"
#include "transport/pool.h"

namespace ferry::ucx_test {
namespace {

Op SparseWrite(Endpoint* ep, MemoryRegion* local, RemoteKey* key,
               const std::vector<Segment>& segs) {
  return testing::SparseOp(OpType::kSparseWrite, ep, local, key, segs.data(), segs.size(), 0);
}

using samehost::PeerRegionTable;
using samehost::RegionEntry;
using samehost::RegionTable;

RegionEntry MakeEntry(uint64_t epoch) {
  RegionEntry e;
  e.epoch = epoch;
  e.addr = epoch * 4096;
  e.length = epoch * 3;
  e.key = ~epoch;
  e.access = static_cast<uint32_t>(epoch & kAccessRemote);
  return e;
}

TEST(UcxRegionTable, PublishFindRemoveAndFull) {
  auto t = RegionTable::Create(4);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto peer = PeerRegionTable::Open(getpid(), t->fd(), t->token());
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  std::vector<uint32_t> slots;
  for (uint64_t epoch = 1; epoch <= 4; ++epoch) {
    auto slot = t->Add(MakeEntry(epoch));
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    slots.push_back(*slot);
  }
  auto full = t->Add(MakeEntry(5));
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted);
  EXPECT_NE(full.status().message().find("region_table_entries"), std::string::npos);
  for (uint64_t epoch = 1; epoch <= 4; ++epoch) {
    const uint32_t slot = peer->Find(epoch);
    ASSERT_EQ(slot, slots[epoch - 1]);
    RegionEntry e;
    ASSERT_TRUE(peer->Read(slot, &e));
    EXPECT_EQ(e.addr, epoch * 4096);
    EXPECT_EQ(e.length, epoch * 3);
    EXPECT_EQ(e.key, ~epoch);
    EXPECT_EQ(e.shm_fd, -1);
  }
  // Removal is visible at once; the slot is reused by a new epoch, which the old one never
  // matches.
  t->Remove(slots[1]);
  EXPECT_EQ(peer->Find(2), PeerRegionTable::kNoSlot);
  auto again = t->Add(MakeEntry(9));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, slots[1]);
  Op op;
  op.type = OpType::kRead;
  op.length = 1;
  RemoteRegion stale;
  stale.epoch = 2;
  stale.addr = 2 * 4096;
  RegionEntry e;
  EXPECT_EQ(peer->Check(slots[1], stale, ~uint64_t{2}, kAccessRemoteRead, op, &e).code(),
            Code::kStale);
  EXPECT_FALSE(peer->Read(4, &e)) << "a slot beyond the capacity";
  EXPECT_EQ(peer->Find(0), PeerRegionTable::kNoSlot);
}

TEST(UcxRegionTable, OpenRefusesWrongTokenAndForeignFds) {
  auto t = RegionTable::Create(2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(PeerRegionTable::Open(getpid(), t->fd(), t->token() + 1).status().code(),
            Code::kProtocol);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_FALSE(PeerRegionTable::Open(getpid(), fds[0], t->token()).ok());
  close(fds[0]);
  close(fds[1]);
  EXPECT_FALSE(PeerRegionTable::Open(getpid(), 100000, t->token()).ok());
  EXPECT_FALSE(PeerRegionTable::Open(getpid(), -1, t->token()).ok());
  EXPECT_EQ(RegionTable::Create(0).status().code(), Code::kInvalidArgument);
}

// A reader racing an owner that rewrites one slot over and over never sees a mix of two
// entries: every copy it gets is self-consistent (fields derived from the epoch) or free.
TEST(UcxRegionTable, ReadersNeverSeeTornEntries) {
  auto t = RegionTable::Create(1);
  ASSERT_TRUE(t.ok());
  auto peer = PeerRegionTable::Open(getpid(), t->fd(), t->token());
  ASSERT_TRUE(peer.ok());
  std::atomic<bool> stop{false};
  std::thread owner([&] {
    for (uint64_t epoch = 1; !stop.load(std::memory_order_relaxed); ++epoch) {
      auto slot = t->Add(MakeEntry(epoch));
      if (slot.ok()) t->Remove(*slot);
    }
  });
  size_t torn = 0, seen = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end) {
    RegionEntry e;
    if (!peer->Read(0, &e) || e.epoch == 0) continue;
    ++seen;
    const RegionEntry want = MakeEntry(e.epoch);
    torn += e.addr != want.addr || e.length != want.length || e.key != want.key ||
            e.access != want.access;
  }
  stop = true;
  owner.join();
  EXPECT_EQ(torn, 0u) << "of " << seen << " live copies";
}

// The owner dies: the mapping we hold stays readable (no SIGBUS), and a new Open fails cleanly.
TEST(UcxRegionTable, PeerGone) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto t = RegionTable::Create(8);
    uint64_t msg[2] = {~uint64_t{0}, 0};
    if (t.ok() && t->Add(MakeEntry(3)).ok()) {
      msg[0] = static_cast<uint64_t>(t->fd());
      msg[1] = t->token();
    }
    if (write(to_parent[1], msg, sizeof(msg)) != sizeof(msg)) _exit(1);
    char c;
    (void)!read(to_child[0], &c, 1);  // until the parent has opened the table
    _exit(0);
  }
  close(to_parent[1]);
  close(to_child[0]);
  uint64_t msg[2];
  ASSERT_EQ(read(to_parent[0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
  ASSERT_NE(msg[0], ~uint64_t{0});
  auto peer = PeerRegionTable::Open(pid, static_cast<int>(msg[0]), msg[1]);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  close(to_parent[0]);
  close(to_child[1]);
  const uint32_t slot = peer->Find(3);
  ASSERT_NE(slot, PeerRegionTable::kNoSlot);
  RegionEntry e;
  ASSERT_TRUE(peer->Read(slot, &e));
  EXPECT_EQ(e.addr, 3u * 4096);
  EXPECT_FALSE(PeerRegionTable::Open(pid, static_cast<int>(msg[0]), msg[1]).ok());
}

// ---- the transport: path (1) between two transports of this process ----

const UcxConfig kShm{"shm", {{"UCX_TLS", "shm,self"}}};

struct Target {
  Pair p;
  std::vector<uint8_t> mem = std::vector<uint8_t>(3 * 4096, 0x11);  // region: the middle page
  std::vector<uint8_t> local = std::vector<uint8_t>(8192, 0xab);
  std::unique_ptr<MemoryRegion> mr, lmr;
};

// Posts one op through `desc` and reaps it WITHOUT driving the server: only a path that needs no
// target CPU (CMA) can complete it.
Completion RunOne(Target& t, const RemoteRegion& desc, OpType type, uint64_t remote_offset,
                  uint64_t length) {
  auto key = t.p.client_ep->Import(desc);
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  if (!key.ok()) return Completion{};
  Op op;
  op.type = type;
  op.ep = t.p.client_ep.get();
  op.local = t.lmr.get();
  op.length = length;
  op.remote = key->get();
  op.remote_offset = remote_offset;
  EXPECT_TRUE(t.p.client->Post({&op, 1}).ok());
  auto got = Reap(*t.p.client, 1, {}, Millis(5000));
  EXPECT_EQ(got.size(), 1u);
  return got.empty() ? Completion{} : got[0];
}

void MakeTarget(Target* t, std::map<std::string, std::string> server_params = {}) {
  TransportOptions so = Options(kShm);
  for (auto& [k, v] : server_params) so.params[k] = v;
  auto pair = Connect(so, Options(kShm));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  t->p = std::move(*pair);
  auto mr = t->p.server->RegisterMemory(t->mem.data() + 4096, 4096, kAccessRemote);
  ASSERT_TRUE(mr.ok()) << mr.status().ToString();
  t->mr = std::move(*mr);
  auto lmr = t->p.client->RegisterMemory(t->local.data(), t->local.size(), kAccessLocal);
  ASSERT_TRUE(lmr.ok());
  t->lmr = std::move(*lmr);
}

TEST(UcxShmTargetChecks, StaleAndForgedDescriptorsAreRefusedOnTheCmaPath) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(MakeTarget(&t));
  const RemoteRegion genuine = t.mr->descriptor();
  // The genuine key works one-sidedly (the server is never driven): this is path (1).
  Completion ok = RunOne(t, genuine, OpType::kWrite, 0, 100);
  ASSERT_TRUE(ok.ok()) << ok.error;
  ASSERT_EQ(t.mem[4096], 0xab);
  std::fill(t.mem.begin() + 4096, t.mem.begin() + 8192, 0x11);

  RemoteRegion forged = genuine;
  forged.rkey[forged.rkey.size() / 2] ^= 0x01;
  EXPECT_EQ(RunOne(t, forged, OpType::kWrite, 0, 100).code, Code::kPermissionDenied);
  forged = genuine;
  forged.length = 2 * 4096;
  EXPECT_EQ(RunOne(t, forged, OpType::kWrite, 4000, 200).code, Code::kOutOfRange);
  forged = genuine;
  forged.addr -= 4096;
  EXPECT_EQ(RunOne(t, forged, OpType::kWrite, 0, 100).code, Code::kStale);
  forged = genuine;
  forged.epoch += 1000;
  EXPECT_EQ(RunOne(t, forged, OpType::kWrite, 0, 100).code, Code::kStale);

  // A sparse write with one bad segment moves nothing, not even its good segments.
  forged = genuine;
  forged.length = 2 * 4096;
  auto key = t.p.client_ep->Import(forged);
  ASSERT_TRUE(key.ok());
  const Segment segs[] = {{0, 0, 64}, {64, 4096 - 32, 64}};
  Op sw;
  sw.type = OpType::kSparseWrite;
  sw.ep = t.p.client_ep.get();
  sw.local = t.lmr.get();
  sw.remote = key->get();
  sw.segments = segs;
  sw.num_segments = 2;
  ASSERT_TRUE(t.p.client->Post({&sw, 1}).ok());
  auto got = Reap(*t.p.client, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, Code::kOutOfRange) << got[0].error;

  // Deregistered: the old epoch is refused for writes and reads; the initiator's buffer and
  // the (still allocated) target memory are untouched.
  t.mr.reset();
  EXPECT_EQ(RunOne(t, genuine, OpType::kWrite, 0, 100).code, Code::kStale);
  std::fill(t.local.begin(), t.local.end(), 0xab);
  EXPECT_EQ(RunOne(t, genuine, OpType::kRead, 0, 100).code, Code::kStale);
  EXPECT_EQ(t.local[0], 0xab);
  // Re-registered at the same address: the old descriptor stays dead, the new one works.
  auto mr = t.p.server->RegisterMemory(t.mem.data() + 4096, 4096, kAccessRemoteRead);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(RunOne(t, genuine, OpType::kWrite, 0, 100).code, Code::kStale);
  RemoteRegion writable = (*mr)->descriptor();
  writable.access = kAccessRemote;  // forged: the new registration is read-only
  EXPECT_EQ(RunOne(t, writable, OpType::kWrite, 0, 100).code, Code::kPermissionDenied);
  Completion rd = RunOne(t, (*mr)->descriptor(), OpType::kRead, 0, 100);
  EXPECT_TRUE(rd.ok()) << rd.error;
  EXPECT_EQ(t.local[0], 0x11);
  for (size_t i = 0; i < t.mem.size(); ++i) {
    ASSERT_EQ(t.mem[i], 0x11) << "a refused op changed target byte " << i;
  }
  EXPECT_TRUE(t.p.client_ep->status().ok()) << "refusals do not fail the endpoint";
}

TEST(UcxShmTargetChecks, TableFullIsAClearErrorAndManyRegionsWork) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(MakeTarget(&t, {{"region_table_entries", "64"}}));
  // One entry is taken by MakeTarget's region.
  std::vector<uint8_t> mem(64 * 256, 0);
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  for (size_t i = 0; i < 63; ++i) {
    auto mr = t.p.server->RegisterMemory(mem.data() + i * 256, 256, kAccessRemote);
    ASSERT_TRUE(mr.ok()) << i << ": " << mr.status().ToString();
    regions.push_back(std::move(*mr));
  }
  auto full = t.p.server->RegisterMemory(mem.data() + 63 * 256, 256, kAccessRemote);
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted) << full.status().ToString();
  // Each region is reachable through its own entry, the last one too.
  for (size_t i : {size_t{0}, size_t{31}, size_t{62}}) {
    Completion c = RunOne(t, regions[i]->descriptor(), OpType::kWrite, 10, 20);
    ASSERT_TRUE(c.ok()) << i << ": " << c.error;
    EXPECT_EQ(mem[i * 256 + 10], 0xab);
    EXPECT_EQ(mem[i * 256 + 9], 0);
  }
  // A freed entry is reused; the key of the region that held it is refused.
  const RemoteRegion old = regions[5]->descriptor();
  regions[5].reset();
  auto again = t.p.server->RegisterMemory(mem.data() + 63 * 256, 256, kAccessRemote);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(RunOne(t, old, OpType::kWrite, 0, 8).code, Code::kStale);
  Completion c = RunOne(t, (*again)->descriptor(), OpType::kWrite, 0, 8);
  EXPECT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(mem[63 * 256], 0xab);

  TransportOptions bad = Options(kShm);
  bad.params["region_table_entries"] = "0";
  EXPECT_EQ(CreateTransport("ucx", bad).status().code(), Code::kInvalidArgument);
}

// ---- shareable memory: path (1) copies through a mapping of the target's memfd ----

// Mappings of memfds named `name` in this process (/proc/self/maps shows "/memfd:<name>").
size_t MemfdMappings(const std::string& name) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return 0;
  size_t n = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    n += std::strstr(line, ("/memfd:" + name + " ").c_str()) != nullptr ||
         std::strstr(line, ("/memfd:" + name + "\n").c_str()) != nullptr;
  }
  std::fclose(f);
  return n;
}

TEST(UcxShmShareable, SparseWriteAndReadCopyThroughTheTargetsMemfd) {
  auto pair = Connect(Options(kShm), Options(kShm));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  const size_t before = MemfdMappings("ferry-shareable");
  auto mem = ShareableMemory::Allocate(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ(MemfdMappings("ferry-shareable"), before + 1);
  auto mr = pair->server->RegisterMemory(mem->data() + 4096, (1 << 20) - 8192, kAccessRemote);
  ASSERT_TRUE(mr.ok());
  std::vector<uint8_t> local(2 << 20);
  for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<uint8_t>(i * 7 + 1);
  auto lmr = pair->client->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(lmr.ok());
  auto key = pair->client_ep->Import((*mr)->descriptor());
  ASSERT_TRUE(key.ok());
  // 10,000 rows of 64 B, scattered; the server is never driven (one-sided).
  std::vector<Segment> segs;
  for (uint64_t i = 0; i < 10000; ++i) segs.push_back({i * 64, (i * 7919 % 10000) * 64, 64});
  const Op w = SparseWrite(pair->client_ep.get(), lmr->get(), key->get(), segs);
  ASSERT_TRUE(pair->client->Post({&w, 1}).ok());
  auto got = Reap(*pair->client, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(got[0].bytes, 640000u);
  EXPECT_EQ(MemfdMappings("ferry-shareable"), before + 2) << "the initiator maps the memfd once";
  for (const Segment& s : segs) {
    ASSERT_EQ(0,
              std::memcmp(mem->data() + 4096 + s.remote_offset, local.data() + s.local_offset, 64));
  }
  EXPECT_EQ(mem->data()[4095], 0) << "nothing before the region";
  // Read back into another area, through the same mapping.
  for (Segment& s : segs) s.local_offset += 640000;
  Op r = w;
  r.type = OpType::kSparseRead;
  ASSERT_TRUE(pair->client->Post({&r, 1}).ok());
  got = Reap(*pair->client, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(0, std::memcmp(local.data() + 640000, local.data(), 640000));
  EXPECT_EQ(MemfdMappings("ferry-shareable"), before + 2);
  // Bounds are still the target's: one segment past the end fails the whole op.
  std::vector<Segment> bad = {{0, 0, 64}, {0, (1 << 20) - 8192 - 32, 64}};
  RemoteRegion longer = (*mr)->descriptor();
  longer.length += 4096;
  auto lkey = pair->client_ep->Import(longer);
  ASSERT_TRUE(lkey.ok());
  std::vector<uint8_t> image(mem->data(), mem->data() + mem->size());
  Op b = w;
  b.remote = lkey->get();
  b.segments = bad.data();
  b.num_segments = bad.size();
  ASSERT_TRUE(pair->client->Post({&b, 1}).ok());
  got = Reap(*pair->client, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, Code::kOutOfRange) << got[0].error;
  EXPECT_EQ(0, std::memcmp(image.data(), mem->data(), image.size()));
  // Deregistered: refused, and the initiator drops its mapping of the region.
  mr->reset();
  ASSERT_TRUE(pair->client->Post({&w, 1}).ok());
  got = Reap(*pair->client, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, Code::kStale) << got[0].error;
  EXPECT_EQ(MemfdMappings("ferry-shareable"), before + 1);
  EXPECT_EQ(0, std::memcmp(image.data(), mem->data(), image.size()));
}

// Rows of every length from 1 to 200 B at unaligned offsets: the mapping path copies short rows
// with fixed-size overlapping moves (cma.cc CopyRow), so each size class and its boundaries
// (4, 8, 16, 32, 64) must move exactly its bytes, no byte more on either side.
TEST(UcxShmShareable, SparseRowsOfEveryLengthMoveExactlyTheirBytes) {
  auto pair = Connect(Options(kShm), Options(kShm));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  const size_t before = MemfdMappings("ferry-shareable");
  constexpr uint64_t kMaxLen = 200;
  std::vector<Segment> segs;
  uint64_t local_at = 1;
  uint64_t remote_at = 3;
  for (uint64_t len = 1; len <= kMaxLen; ++len) {
    segs.push_back({local_at, remote_at, len});
    local_at += len + 5;
    remote_at += len + 3;
  }
  auto mem = ShareableMemory::Allocate(1 << 16);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  ASSERT_LT(remote_at, mem->size());
  for (size_t i = 0; i < mem->size(); ++i) mem->data()[i] = static_cast<uint8_t>(i * 13 + 5);
  auto mr = pair->server->RegisterMemory(mem->data(), mem->size(), kAccessRemote);
  ASSERT_TRUE(mr.ok());
  std::vector<uint8_t> local(2 * local_at);
  for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<uint8_t>(i * 7 + 1);
  auto lmr = pair->client->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(lmr.ok());
  auto key = pair->client_ep->Import((*mr)->descriptor());
  ASSERT_TRUE(key.ok());

  std::vector<uint8_t> want(mem->data(), mem->data() + mem->size());
  for (const Segment& s : segs) {
    std::memcpy(want.data() + s.remote_offset, local.data() + s.local_offset, s.length);
  }
  const Op w = SparseWrite(pair->client_ep.get(), lmr->get(), key->get(), segs);
  ASSERT_TRUE(pair->client->Post({&w, 1}).ok());
  auto got = Reap(*pair->client, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(MemfdMappings("ferry-shareable"), before + 2) << "the write went through the mapping";
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(mem->data()[i], want[i]) << "target byte " << i;
  }

  // Read the same rows back into the second half of the local buffer.
  std::vector<uint8_t> local_want(local);
  for (Segment& s : segs) {
    s.local_offset += local_at;
    std::memcpy(local_want.data() + s.local_offset, want.data() + s.remote_offset, s.length);
  }
  Op r = SparseWrite(pair->client_ep.get(), lmr->get(), key->get(), segs);
  r.type = OpType::kSparseRead;
  ASSERT_TRUE(pair->client->Post({&r, 1}).ok());
  got = Reap(*pair->client, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  for (size_t i = 0; i < local.size(); ++i) {
    ASSERT_EQ(local[i], local_want[i]) << "initiator byte " << i;
  }
}

// ps::MappedBuffer created shareable: rows written by a peer land through the mapping, survive
// growth (deregister, mremap, register again), and shrinking/Discard free pages as zeros.
TEST(UcxShmShareable, MappedBufferRowsGrowAndStayShareable) {
  auto pair = Connect(Options(kShm), Options(kShm));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  auto buf = ps::MappedBuffer::Create(ps::GrowthMode::kRemap, 1 << 16, 0, false, true);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  ASSERT_GE(buf->fd(), 0);
  EXPECT_EQ(FindShareableBacking(buf->data() + 100, 200).offset, 100u);
  std::vector<uint8_t> local(1 << 16, 0x5c);
  auto lmr = pair->client->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(lmr.ok());
  auto write_rows = [&](uint64_t first_row) {
    auto mr = pair->server->RegisterMemory(buf->data(), buf->size(), kAccessRemote);
    EXPECT_TRUE(mr.ok());
    if (!mr.ok()) return;
    auto key = pair->client_ep->Import((*mr)->descriptor());
    EXPECT_TRUE(key.ok());
    if (!key.ok()) return;
    std::vector<Segment> segs;
    for (uint64_t i = 0; i < 64; ++i) segs.push_back({i * 64, (first_row + i) * 64, 64});
    const Op w = SparseWrite(pair->client_ep.get(), lmr->get(), key->get(), segs);
    EXPECT_TRUE(pair->client->Post({&w, 1}).ok());
    auto got = Reap(*pair->client, 1, {}, Millis(5000));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(got[0].ok()) << got[0].error;
  };
  write_rows(0);
  EXPECT_EQ(buf->data()[0], 0x5c);
  EXPECT_EQ(MemfdMappings("ferry-rows"), 1u) << "the key (and its mapping) died with the lambda";
  ASSERT_TRUE(buf->Resize(1 << 22).ok());
  EXPECT_EQ(FindShareableBacking(buf->data() + (1 << 21), 64).fd, buf->fd());
  EXPECT_EQ(buf->data()[64 * 63], 0x5c) << "rows survive growth";
  EXPECT_EQ(buf->data()[1 << 21], 0) << "grown bytes are zero";
  write_rows(60000);
  EXPECT_EQ(buf->data()[60000 * 64], 0x5c);
  buf->Discard(0, 1 << 16);
  EXPECT_EQ(buf->data()[0], 0) << "discarded pages read as zero";
  ASSERT_TRUE(buf->Resize(1 << 16).ok());
  ASSERT_TRUE(buf->Resize(1 << 22).ok());
  EXPECT_EQ(buf->data()[60000 * 64], 0) << "a shrunk tail comes back as zeros";
  EXPECT_FALSE(ps::MappedBuffer::Create(ps::GrowthMode::kReserve, 4096, 1 << 20, false, true).ok());
}

}  // namespace
}  // namespace ferry::ucx_test
