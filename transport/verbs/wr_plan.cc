#include "transport/verbs/wr_plan.h"

#include <arpa/inet.h>

#include <algorithm>

namespace ferry::verbs {

void PlanSparse(std::span<const Segment> segments, uint64_t local_base, uint32_t lkey,
                uint64_t remote_base, uint32_t rkey, ibv_wr_opcode opcode, uint32_t max_sge,
                uint64_t max_wr_bytes, WrPlan* plan) {
  if (max_sge == 0) max_sge = 1;
  PlannedWr* cur = nullptr;
  uint64_t cur_remote_end = 0;
  for (const Segment& s : segments) {
    uint64_t done = 0;
    while (done < s.length) {
      // A segment longer than max_wr_bytes (or than an SGE's 32-bit length) is cut into pieces.
      uint64_t piece = std::min<uint64_t>({s.length - done, max_wr_bytes, 0x80000000ull});
      const uint64_t remote = remote_base + s.remote_offset + done;
      const bool extend = cur != nullptr && cur->num_sge < max_sge && cur_remote_end == remote &&
                          cur->bytes + piece <= max_wr_bytes;
      if (!extend) {
        plan->wrs.push_back(PlannedWr{opcode, false, 0, remote, rkey,
                                      static_cast<uint32_t>(plan->sges.size()), 0, 0});
        cur = &plan->wrs.back();
      }
      plan->sges.push_back(
          ibv_sge{local_base + s.local_offset + done, static_cast<uint32_t>(piece), lkey});
      cur->num_sge++;
      cur->bytes += piece;
      cur_remote_end = remote + piece;
      plan->bytes += piece;
      done += piece;
    }
  }
}

void PlanContiguous(uint64_t local_addr, uint64_t length, uint32_t lkey, uint64_t remote_addr,
                    uint32_t rkey, ibv_wr_opcode opcode, uint64_t max_wr_bytes, WrPlan* plan) {
  Segment s{0, 0, length};
  PlanSparse(std::span<const Segment>(&s, 1), local_addr, lkey, remote_addr, rkey, opcode, 1,
             max_wr_bytes, plan);
}

void PlanSend(uint64_t local_addr, uint64_t length, uint32_t lkey, uint32_t fragment, uint32_t tag,
              WrPlan* plan) {
  if (fragment == 0) fragment = 1;
  uint64_t off = 0;
  do {
    const uint64_t chunk = std::min<uint64_t>(length - off, fragment);
    PlannedWr wr{
        IBV_WR_SEND_WITH_IMM, true, tag, 0, 0, static_cast<uint32_t>(plan->sges.size()), 0, chunk};
    if (chunk > 0) {
      plan->sges.push_back(ibv_sge{local_addr + off, static_cast<uint32_t>(chunk), lkey});
      wr.num_sge = 1;
    }
    off += chunk;
    if (off == length) wr.imm |= kLastFragment;
    plan->wrs.push_back(wr);
    plan->bytes += chunk;
  } while (off < length);
}

void PutFurthestFirst(WrPlan* plan) {
  if (plan->wrs.size() < 2) return;
  auto end = [](const PlannedWr& w) { return w.remote_addr + w.bytes; };
  auto it =
      std::max_element(plan->wrs.begin(), plan->wrs.end(),
                       [&](const PlannedWr& a, const PlannedWr& b) { return end(a) < end(b); });
  std::rotate(plan->wrs.begin(), it, it + 1);
}

void AddNotify(uint32_t imm, uint64_t remote_addr, uint32_t rkey, WrPlan* plan) {
  if (plan->wrs.empty()) {
    plan->wrs.push_back(PlannedWr{IBV_WR_RDMA_WRITE, false, 0, remote_addr, rkey,
                                  static_cast<uint32_t>(plan->sges.size()), 0, 0});
  }
  PlannedWr& last = plan->wrs.back();
  last.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  last.with_imm = true;
  last.imm = imm;
}

ibv_send_wr MakeSendWr(const PlannedWr& pw, ibv_sge* sges, uint32_t max_inline) {
  ibv_send_wr wr{};
  wr.sg_list = pw.num_sge ? &sges[pw.first_sge] : nullptr;
  wr.num_sge = static_cast<int>(pw.num_sge);
  wr.opcode = pw.opcode;
  if (pw.with_imm) wr.imm_data = htonl(pw.imm);
  if (pw.opcode != IBV_WR_SEND && pw.opcode != IBV_WR_SEND_WITH_IMM) {
    wr.wr.rdma.remote_addr = pw.remote_addr;
    wr.wr.rdma.rkey = pw.rkey;
  }
  if (pw.opcode != IBV_WR_RDMA_READ && pw.bytes > 0 && pw.bytes <= max_inline) {
    wr.send_flags |= IBV_SEND_INLINE;
  }
  return wr;
}

void PlanPostBatch(std::span<const size_t> remaining, size_t sq_free, size_t cq_budget,
                   size_t max_batch, size_t signal_every, std::vector<BatchPiece>* out) {
  out->clear();
  if (signal_every == 0) signal_every = 1;
  size_t room = std::min({sq_free, max_batch, cq_budget * signal_every});
  for (size_t i = 0; i < remaining.size() && room > 0; ++i) {
    if (remaining[i] == 0) continue;
    size_t take = std::min(remaining[i], room);
    out->push_back(BatchPiece{i, take});
    room -= take;
    if (take < remaining[i]) break;  // keep per-endpoint order: nothing may overtake this op
  }
}

}  // namespace ferry::verbs
