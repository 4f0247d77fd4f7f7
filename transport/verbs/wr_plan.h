// Work-request planning: how an Op becomes verbs work requests, and how queued work requests
// are cut into post-lists. Pure functions (no device), unit-tested on any host.
//
// Sparse lists: consecutive segments whose REMOTE ranges are contiguous share one WR, each
// segment one SGE, up to max_sge SGEs and max_wr_bytes bytes per WR:
//
//   segments (local, remote, len): (0,100,8) (64,108,8) (32,116,8) (0,500,8)
//   WRs:  [remote 100, 24 bytes, SGEs {0+8, 64+8, 32+8}]  [remote 500, 8 bytes, SGE {0+8}]
//
// Post batches: the send queue has `sq_free` slots and the CQ `cq_budget` spare entries. A
// batch's WRs are signaled every `signal_every`-th and at its end, whatever Ops they belong to:
// an RC QP completes its WRs in order, so a completion retires every WR posted before it, and a
// batch that ends in the middle of an Op still releases the slots it holds (an SQ full of
// unsignaled WRs would never drain). One completion per list of small Ops instead of one per Op;
// the periodic ones keep progress visible while a long list crawls (RNR retries against a peer
// that posts receives slowly: the liveness backstop counts from the last completion). An error
// completes the failed WR whether signaled or not.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transport/common/ring.h"
#include "transport/transport.h"

namespace ferry::verbs {

struct PlannedWr {
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool with_imm = false;
  uint32_t imm = 0;  // host order; converted to network order when posted
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t first_sge = 0;  // into WrPlan::sges
  uint32_t num_sge = 0;
  uint64_t bytes = 0;
};

struct WrPlan {
  std::vector<PlannedWr> wrs;
  std::vector<ibv_sge> sges;
  uint64_t bytes = 0;
};

// Sparse one-sided op. Zero-length segments are dropped.
void PlanSparse(std::span<const Segment> segments, uint64_t local_base, uint32_t lkey,
                uint64_t remote_base, uint32_t rkey, ibv_wr_opcode opcode, uint32_t max_sge,
                uint64_t max_wr_bytes, WrPlan* plan);

// Contiguous one-sided op: one WR (split only if longer than max_wr_bytes).
void PlanContiguous(uint64_t local_addr, uint64_t length, uint32_t lkey, uint64_t remote_addr,
                    uint32_t rkey, ibv_wr_opcode opcode, uint64_t max_wr_bytes, WrPlan* plan);

// Two-sided message: SEND_WITH_IMM fragments of at most `fragment` bytes (the peer's receive
// buffer size); imm = tag, with kLastFragment set on the final one. A 0-byte message is one
// fragment without SGEs.
inline constexpr uint32_t kLastFragment = 1u;
void PlanSend(uint64_t local_addr, uint64_t length, uint32_t lkey, uint32_t fragment, uint32_t tag,
              WrPlan* plan);

// Moves the WR reaching furthest into the remote region to the front. An RC QP executes WRs in
// order and stops at the first the target HCA refuses, so a list that runs past the end of the
// real region (forged descriptor) is refused before any of its in-bounds WRs lands.
void PutFurthestFirst(WrPlan* plan);

// Turns the plan's last WR into WRITE_WITH_IMM carrying `imm` (adding a 0-byte WR if empty).
void AddNotify(uint32_t imm, uint64_t remote_addr, uint32_t rkey, WrPlan* plan);

struct BatchPiece {
  size_t op = 0;     // index into the `remaining` span
  size_t count = 0;  // WRs of that op in this batch (its next ones)
};

// The ibv_send_wr of a planned WR (sges: its plan's SGE array): opcode, immediate (network
// order), remote address for RDMA opcodes, and IBV_SEND_INLINE when the payload is non-empty,
// at most max_inline bytes and not a READ's (a READ has nothing to send). wr_id, signaling and
// the list link are the poster's.
ibv_send_wr MakeSendWr(const PlannedWr& pw, ibv_sge* sges, uint32_t max_inline);

// Which WRs go into the next post-list. remaining[i] = WRs op i still has to post, in queue
// order; stops at the first op that does not fit entirely only after taking what fits of it.
// A batch of n WRs holds SignaledWrs(n, signal_every) CQ entries, within cq_budget.
// Replaces *out (its capacity is reused: the data path plans a batch per post without
// allocating once warm).
void PlanPostBatch(std::span<const size_t> remaining, size_t sq_free, size_t cq_budget,
                   size_t max_batch, size_t signal_every, std::vector<BatchPiece>* out);

// Whether the k-th WR (from 0) of a post-list of `total` is signaled, and how many WRs of the list
// a list of `total` signals.
inline bool IsSignaled(size_t k, size_t total, size_t signal_every) {
  return k + 1 == total || (k + 1) % signal_every == 0;
}
inline size_t SignaledWrs(size_t total, size_t signal_every) {
  return (total + signal_every - 1) / signal_every;
}

// The WRs posted on one QP and not yet retired, as pieces (record id, WR count) in post order.
// An RC QP completes its WRs in order, so a completion retires the OLDEST posted WRs, and an
// error completion tells that every WR posted before the failed one completed. The retire
// callbacks get (record id, WRs of that record retired now), oldest first; a piece may be
// retired in parts. No device, no allocation once the ring has grown.
class PostedWrs {
 public:
  bool empty() const { return pieces_.empty(); }
  void Posted(uint64_t record, uint32_t count) { pieces_.push() = Piece{record, count}; }
  void Clear() { pieces_.clear(); }

  // A signaled WR's completion: its `count` WRs (it and the unsignaled ones before it).
  template <typename F>
  void Retire(uint32_t count, F&& retire) {
    while (count > 0 && !pieces_.empty()) {
      Piece& p = pieces_.front();
      const uint32_t n = count < p.count ? count : p.count;
      const uint64_t record = p.record;
      p.count -= n;
      count -= n;
      if (p.count == 0) pieces_.pop();
      retire(record, n);
    }
  }
  // A WR of `record` failed: every piece posted before that record's first retires whole.
  template <typename F>
  void RetireBefore(uint64_t record, F&& retire) {
    while (!pieces_.empty() && pieces_.front().record != record) {
      const Piece p = pieces_.pop();
      retire(p.record, p.count);
    }
  }

 private:
  struct Piece {
    uint64_t record = 0;
    uint32_t count = 0;
  };
  common::Ring<Piece> pieces_;
};

}  // namespace ferry::verbs
