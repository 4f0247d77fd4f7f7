// The happy path of ValidateOp (transport/backend.h), which every backend runs on every posted
// op, allocates nothing: error text is built only on failure. Its own binary, because it replaces
// the global operator new to count allocations (tests/common/count_allocs.cc).
#include <gtest/gtest.h>

#include <vector>

#include "tests/common/count_allocs.h"
#include "tests/core/fakes.h"
#include "transport/backend.h"

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
    testing::CountAllocs count;
    const bool ok = ValidateOp(op, caps, 1000, 123456789).ok();
    const uint64_t allocs = count.Stop();
    EXPECT_TRUE(ok) << OpTypeName(op.type);
    EXPECT_EQ(allocs, 0u) << OpTypeName(op.type) << " allocated on the happy path";
  }
  // The counter works: a refused op builds its message.
  Op bad = ops[2];
  bad.remote_offset = 1ull << 40;
  testing::CountAllocs count;
  const Status s = ValidateOp(bad, caps, 1000, 123456789);
  const uint64_t allocs = count.Stop();
  EXPECT_FALSE(s.ok());
  EXPECT_GT(allocs, 0u);
}

}  // namespace
}  // namespace ferry
