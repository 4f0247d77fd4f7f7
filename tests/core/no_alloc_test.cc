// The happy path of ValidateOp (transport/backend.h), which every backend runs on every posted
// op, allocates nothing: error text is built only on failure. Its own binary, because it replaces
// the global operator new to count allocations.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <vector>

#include "tests/core/fakes.h"
#include "transport/backend.h"

namespace {
thread_local bool g_counting = false;
thread_local uint64_t g_allocs = 0;
}  // namespace

void* operator new(size_t n) {
  if (g_counting) ++g_allocs;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// gcc cannot see that this file's operator new is malloc underneath.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace ferry {
namespace {

using testing_fakes::FakeEndpoint;
using testing_fakes::FakeKey;
using testing_fakes::FakeRegion;

TEST(NoAlloc, ValidOpsOfEveryTypeAllocateNothingAndErrorsDo) {
  Capabilities caps;
  caps.send_recv = caps.write = caps.read = caps.sparse_write = caps.sparse_read = true;
  caps.notify = true;
  caps.max_message_size = 1ull << 30;
  caps.max_segments = 1000;
  FakeRegion local(1 << 20, kAccessLocal);
  FakeKey key(1 << 20, kAccessRemote);
  FakeEndpoint ep;
  std::vector<Segment> segs = {{0, 64, 64}, {128, 4096, 256}};
  std::vector<Op> ops;
  for (OpType t : {OpType::kSend, OpType::kRecv, OpType::kWrite, OpType::kRead,
                   OpType::kSparseWrite, OpType::kSparseRead}) {
    Op op;
    op.type = t;
    op.ep = &ep;
    op.local = &local;
    op.length = 4096;
    op.remote = &key;
    op.remote_offset = 8192;
    op.segments = segs.data();
    op.num_segments = segs.size();
    if (t == OpType::kWrite) op.flags = kOpNotify;
    ops.push_back(op);
  }
  // A large op index: its name ("op 123456789 (write)") does not fit a short string in place.
  for (const Op& op : ops) {
    g_allocs = 0;
    g_counting = true;
    const bool ok = ValidateOp(op, caps, 1000, 123456789).ok();
    g_counting = false;
    EXPECT_TRUE(ok) << OpTypeName(op.type);
    EXPECT_EQ(g_allocs, 0u) << OpTypeName(op.type) << " allocated on the happy path";
  }
  // The counter works: a refused op builds its message.
  Op bad = ops[2];
  bad.remote_offset = 1ull << 40;
  g_allocs = 0;
  g_counting = true;
  const Status s = ValidateOp(bad, caps, 1000, 123456789);
  g_counting = false;
  EXPECT_FALSE(s.ok());
  EXPECT_GT(g_allocs, 0u);
}

}  // namespace
}  // namespace ferry
