// What the kernels put into and read out of the buffers: patterns, tag bytes, the row lists of
// sparse ops, the gathers of the pack ops, and the checks of every transfer (kernels.cc drives
// them; layout and seeds in internal.h and geometry.cc).
//
// Rows: op `seq` uses `rows` rows of the target-side partition seq % slots, in the order of a
// seeded permutation (RowWalk). Sparse ops move them between the contiguous source slot and
// those places; pack_write gathers them from the same places of the initiator's own region;
// pack_read's target gathers them from its region. A full check compares each row with the
// pattern of the place it came from or went to.
#include <cstring>

#include "tools/bench/internal.h"
#include "tools/bench/pattern.h"
#include "transport/common/copy_row.h"

namespace ferry::bench::internal {

RowWalk::RowWalk(const BenchConfig& c, const Phase& p, const Stream& s, uint64_t seq)
    : perm_(p.perm.data()),
      part_rows_(p.g.part_rows),
      row_size_(c.row_size),
      base_((seq % p.g.slots) * p.g.part_bytes),
      idx_(RowStart(c, p, s, seq)) {}

void BuildSegments(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq) {
  const uint64_t slot = seq % p.g.slots;
  std::vector<Segment>& segs = s.segs[slot];
  segs.resize(c.rows);
  // RowOffset(seq, k) for every k, with the per-op hash hoisted out of the loop: building the
  // list is part of the measured time, and the memcpy reference gets its offsets precomputed.
  const uint64_t src = s.src + p.g.SrcOffset(slot);
  RowWalk walk(c, p, s, seq);
  for (uint64_t k = 0; k < c.rows; ++k) {
    segs[k].local_offset = src + k * c.row_size;
    segs[k].remote_offset = s.target + walk.Next();
    segs[k].length = c.row_size;
  }
}

void GatherRows(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq) {
  uint8_t* dst = Base(s) + s.src + p.g.SrcOffset(seq % p.g.slots);
  const uint8_t* area = Base(s) + s.target;
  RowWalk walk(c, p, s, seq);
  for (uint64_t k = 0; k < c.rows; ++k) {
    common::CopyRow(dst + k * c.row_size, area + walk.Next(), c.row_size);
  }
}

void FillOutgoing(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, uint64_t seed) {
  const Geometry& g = p.g;
  if (c.op == BenchOp::kPackWrite) {
    GatherRows(c, p, s, seq);  // the pattern is the region's, laid down by PreparePhase
    return;
  }
  uint8_t* dst = Base(s) + s.src + g.SrcOffset(seq % g.slots);
  if (g.check == Check::kFull) FillPattern(dst, g.size, seed);
  if (g.tags) {
    if (IsSparse(c.op)) {
      for (uint64_t k = 0; k < c.rows; ++k) dst[k * c.row_size + c.row_size - 1] = Tag(seq);
    } else {
      dst[g.size - 1] = Tag(seq);
    }
  }
  if (IsSparse(c.op)) BuildSegments(c, p, s, seq);
}

void PoisonRead(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq) {
  const Geometry& g = p.g;
  const uint64_t slot = seq % g.slots;
  uint8_t* dst = Base(s) + s.src + g.SrcOffset(slot);
  const uint64_t seed = RegionSeed(c, s, p);
  if (IsSparse(c.op)) {
    BuildSegments(c, p, s, seq);
    if (g.check != Check::kFull) return;
    RowWalk walk(c, p, s, seq);
    for (uint64_t k = 0; k < c.rows; ++k) {
      const uint64_t off = walk.Next();
      uint8_t* row = dst + k * c.row_size;
      row[0] = static_cast<uint8_t>(~PatternByte(seed, off));
      row[c.row_size - 1] = static_cast<uint8_t>(~PatternByte(seed, off + c.row_size - 1));
    }
  } else if (g.check == Check::kFull) {
    const uint64_t off = g.TargetOffset(slot);
    dst[0] = static_cast<uint8_t>(~PatternByte(seed, off));
    dst[g.size - 1] = static_cast<uint8_t>(~PatternByte(seed, off + g.size - 1));
  }
}

Status CheckRows(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, const uint8_t* got,
                 const std::string& what) {
  const uint64_t seed = RegionSeed(c, s, p);
  RowWalk walk(c, p, s, seq);
  for (uint64_t k = 0; k < c.rows; ++k) {
    const uint64_t off = walk.Next();
    const uint8_t* row = got + k * c.row_size;
    if (MatchesPattern(row, c.row_size, seed, off)) continue;
    return CheckPattern(row, c.row_size, seed, off,
                        StreamName(s) + " " + what + " row " + std::to_string(k) +
                            " (region offset " + std::to_string(off) + ")");
  }
  return Status::Ok();
}

Status CheckRead(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq) {
  const Geometry& g = p.g;
  if (g.check != Check::kFull) return Status::Ok();
  const uint64_t slot = seq % g.slots;
  const uint8_t* dst = Base(s) + s.src + g.SrcOffset(slot);
  if (UsesRows(c.op)) {
    return CheckRows(c, p, s, seq, dst,
                     c.op == BenchOp::kPackRead ? "packed reply" : "sparse read");
  }
  return CheckPattern(dst, g.size, RegionSeed(c, s, p), g.TargetOffset(slot),
                      StreamName(s) + " read into slot " + std::to_string(slot));
}

bool IncomingMatches(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, uint64_t seed) {
  const Geometry& g = p.g;
  const uint8_t* area = Base(s) + s.target;
  const uint64_t tag_bytes = g.tags ? 1 : 0;
  if (c.op == BenchOp::kPackWrite) {
    return CheckRows(c, p, s, seq, area + g.PackOffset(seq % g.slots), "packed write").ok();
  }
  if (!IsSparse(c.op)) {
    const uint8_t* d = area + g.TargetOffset(seq % g.slots);
    if (tag_bytes && LoadByte(d + g.size - 1) != Tag(seq)) return false;
    return MatchesPattern(d, g.size - tag_bytes, seed, 0);
  }
  RowWalk walk(c, p, s, seq);
  for (uint64_t k = 0; k < c.rows; ++k) {
    const uint8_t* row = area + walk.Next();
    if (tag_bytes && LoadByte(row + c.row_size - 1) != Tag(seq)) return false;
    if (!MatchesPattern(row, c.row_size - tag_bytes, seed, k * c.row_size)) return false;
  }
  return true;
}

Status IncomingError(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, uint64_t seed) {
  const Geometry& g = p.g;
  const uint8_t* area = Base(s) + s.target;
  const uint64_t tag_bytes = g.tags ? 1 : 0;
  const std::string what = StreamName(s) + " op " + std::to_string(seq);
  if (c.op == BenchOp::kPackWrite) {
    return CheckRows(c, p, s, seq, area + g.PackOffset(seq % g.slots), "packed write");
  }
  auto check_tag = [&](const uint8_t* last, const std::string& where) -> Status {
    if (!tag_bytes || LoadByte(last) == Tag(seq)) return Status::Ok();
    return Status(Code::kProtocol, "verification failed: " + where + ": last byte is " +
                                       std::to_string(LoadByte(last)) + ", expected tag " +
                                       std::to_string(Tag(seq)));
  };
  if (!IsSparse(c.op)) {
    const uint8_t* d = area + g.TargetOffset(seq % g.slots);
    FERRY_RETURN_IF_ERROR(check_tag(d + g.size - 1, what));
    return CheckPattern(d, g.size - tag_bytes, seed, 0, what);
  }
  for (uint64_t k = 0; k < c.rows; ++k) {
    const uint64_t off = RowOffset(c, p, s, seq, k);
    const uint8_t* row = area + off;
    const std::string where =
        what + " row " + std::to_string(k) + " (offset " + std::to_string(off) + ")";
    FERRY_RETURN_IF_ERROR(check_tag(row + c.row_size - 1, where));
    FERRY_RETURN_IF_ERROR(CheckPattern(row, c.row_size - tag_bytes, seed, k * c.row_size, where));
  }
  return Status::Ok();
}

}  // namespace ferry::bench::internal
