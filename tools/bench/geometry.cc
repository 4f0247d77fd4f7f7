// Buffer geometry of a phase and the pattern seeds, shared by both sides: each side computes
// them from the same config and the same backend capabilities, so nothing about buffer layout
// travels on the wire except the region descriptors.
#include <algorithm>
#include <cstdlib>

#include "tools/bench/internal.h"
#include "tools/bench/pattern.h"

namespace ferry::bench::internal {
namespace {

constexpr uint64_t kSeedRequest = 0x7265717565737431ull;
constexpr uint64_t kSeedReply = 0x7265706c79763031ull;
constexpr uint64_t kSeedRegion = 0x726567696f6e3031ull;
constexpr uint64_t kMaxSlotRows = 1u << 20;  // slots * rows segment entries per stream
constexpr uint64_t kMaxPartRows = 1u << 22;  // rows eligible per partition

}  // namespace

void FreeDeleter::operator()(uint8_t* p) const {
  std::free(p);
}

Geometry MakeGeometry(const BenchConfig& c, uint64_t size, Check check, const Capabilities& caps) {
  Geometry g;
  const bool rows = UsesRows(c.op);
  g.size = OpBytes(c, size);
  g.check = check;
  if (c.mode == Mode::kLatency) {
    // Two alternating buffers whatever the check: the ping-pong's request and reply.
    g.slots = 2;
    g.depth = 1;
    g.notify = c.op == BenchOp::kWriteImm;
    g.tags = c.op == BenchOp::kWrite || c.op == BenchOp::kSparseWrite;
  } else {
    g.slots = std::clamp<uint64_t>(2ull * c.depth, 2, std::max<uint64_t>(2, kSlotBudget / g.size));
    if (rows) {
      g.slots = std::min<uint64_t>(g.slots, c.region_size / g.size);
      g.slots = std::max<uint64_t>(2, std::min<uint64_t>(g.slots, kMaxSlotRows / c.rows));
    }
    if (c.op == BenchOp::kPackRead) g.slots = std::min<uint64_t>(g.slots, 2 * kMaxPackReadDepth);
    // A checked sparse write carries a notification, so that the target checks each op on
    // arrival; the timed pass writes without one, as a contiguous write does (ib_write_bw).
    g.notify = c.op == BenchOp::kWriteImm ||
               (c.op == BenchOp::kSparseWrite && caps.notify && check == Check::kFull);
    g.credits = c.op == BenchOp::kSend || g.notify;
    g.requests = c.op == BenchOp::kPackRead;
    g.shared = check == Check::kRef;
    // With credits the target must have verified a slot before it is reused, so only half the
    // slots are in flight; without, every slot can be.
    g.depth = g.credits ? std::max<uint64_t>(1, std::min<uint64_t>(c.depth, g.slots / 2))
                        : std::min<uint64_t>(c.depth, g.slots);
  }
  if (rows) {
    g.part_bytes = (c.region_size / g.slots) / c.row_size * c.row_size;
    g.part_rows = std::min<uint64_t>(g.part_bytes / c.row_size, kMaxPartRows);
  }
  return g;
}

uint64_t SrcAreaBytes(const BenchConfig& c, const Capabilities& caps) {
  uint64_t bytes = 0;
  for (const PhaseSpec& spec : PhaseSpecs(c)) {
    const Geometry g = MakeGeometry(c, spec.size, spec.check, caps);
    bytes = std::max(bytes, g.slots * g.size);
  }
  return bytes;
}

uint64_t TargetAreaBytes(const BenchConfig& c, const Capabilities& caps) {
  if (UsesRows(c.op)) return c.region_size;
  return SrcAreaBytes(c, caps);
}

Phase MakePhase(const BenchConfig& c, uint32_t index, const PhaseSpec& spec,
                const Capabilities& caps) {
  Phase p;
  p.index = index;
  p.g = MakeGeometry(c, spec.size, spec.check, caps);
  if (UsesRows(c.op)) {
    // Fisher-Yates with a seeded generator: both sides build the same permutation.
    p.perm.resize(p.g.part_rows);
    for (uint64_t i = 0; i < p.g.part_rows; ++i) p.perm[i] = static_cast<uint32_t>(i);
    for (uint64_t i = p.g.part_rows - 1; i > 0; --i) {
      const uint64_t j = MixSeed(c.seed, index, i) % (i + 1);
      std::swap(p.perm[i], p.perm[j]);
    }
  }
  return p;
}

// Row k of op `seq` is the (base + k)-th entry of the permutation: `rows` consecutive entries are
// distinct rows, so an op never writes one row twice, while base varies randomly per op.
uint64_t RowStart(const BenchConfig& c, const Phase& p, const Stream& s, uint64_t seq) {
  return MixSeed(c.seed ^ 0x726f7773ull, s.index, p.index, seq) % p.g.part_rows;
}

uint64_t RowOffset(const BenchConfig& c, const Phase& p, const Stream& s, uint64_t seq,
                   uint64_t k) {
  const uint64_t base = RowStart(c, p, s, seq);
  const uint64_t row = p.perm[(base + k) % p.g.part_rows];
  return (seq % p.g.slots) * p.g.part_bytes + row * c.row_size;
}

uint64_t RequestSeed(const BenchConfig& c, const Stream& s, const Phase& p, uint64_t seq) {
  return MixSeed(c.seed ^ kSeedRequest, s.index, p.index, seq);
}
uint64_t ReplySeed(const BenchConfig& c, const Stream& s, const Phase& p, uint64_t seq) {
  return MixSeed(c.seed ^ kSeedReply, s.index, p.index, seq);
}
uint64_t RegionSeed(const BenchConfig& c, const Stream& s, const Phase& p) {
  return MixSeed(c.seed ^ kSeedRegion, s.index, p.index);
}

}  // namespace ferry::bench::internal
