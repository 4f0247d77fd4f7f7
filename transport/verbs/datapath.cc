// Data path: Post (validation, WR planning, post-lists), CQ polling, receive matching.
//
// wr_id layout:
//   send side:    [63] 0 | [62..16] OpRecord id | [15..0] WRs its completion retires: on a
//                 signaled WR, it and the unsignaled ones before it in its post-list; else 0
//   receive side: [63] 1 | [31..0] receive-pool buffer index
// OpRecord id (47 bits): [46..24] generation of the slot | [23..0] slot in the record pool.
#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <typeinfo>

#include "transport/common/coarse_clock.h"
#include "transport/verbs/errors.h"
#include "transport/verbs/verbs_transport.h"

namespace ferry::verbs {
namespace {

constexpr uint64_t kRecvBit = 1ull << 63;
constexpr uint64_t kSlotBits = 24;
constexpr uint64_t kSlotMask = (1ull << kSlotBits) - 1;
constexpr uint64_t kGenMask = (1ull << (47 - kSlotBits)) - 1;
constexpr size_t kMaxPostList = 64;
constexpr size_t kSignalEvery = 16;  // wr_plan.h: at most 4 completions per full post-list
constexpr int kPollBatch = 32;

const char* WrName(OpType t, OpRecord::Kind kind) {
  if (kind == OpRecord::Kind::kHeartbeat) return "heartbeat RDMA WRITE";
  if (kind == OpRecord::Kind::kControl) return "handshake SEND";
  switch (t) {
    case OpType::kSend:
      return "SEND";
    case OpType::kWrite:
    case OpType::kSparseWrite:
      return "RDMA WRITE";
    case OpType::kRead:
    case OpType::kSparseRead:
      return "RDMA READ";
    default:
      return "work request";
  }
}

}  // namespace

// Completions are filled in place in the ring's reused slot.
Completion& VerbsTransport::PushCompletionLocked(uint64_t context, OpType type, Endpoint* ep,
                                                 uint64_t bytes) {
  Completion& c = ready_.push();
  c.context = context;
  c.type = type;
  c.ep = ep;
  c.bytes = bytes;
  return c;
}

void VerbsTransport::FailOpLocked(uint64_t context, OpType type, Endpoint* ep, const Status& why) {
  Completion& c = PushCompletionLocked(context, type, ep, 0);
  c.code = why.code();
  c.error = why.message();
}

// ---- the record pool ----

OpRecord* VerbsTransport::NewRecordLocked(OpRecord::Kind kind, VerbsEndpoint* ep) {
  if (free_records_.empty()) {
    if (records_.size() > kSlotMask) return nullptr;  // 16 M records in flight
    records_.push_back(std::make_unique<OpRecord>());
    records_.back()->slot = static_cast<uint32_t>(records_.size() - 1);
    free_records_.push_back(records_.back().get());
  }
  OpRecord* rec = free_records_.back();
  free_records_.pop_back();
  rec->gen = static_cast<uint32_t>((rec->gen + 1) & kGenMask);
  rec->id = (uint64_t{rec->gen} << kSlotBits) | rec->slot;
  rec->in_use = true;
  rec->kind = kind;
  rec->ep = ep;
  return rec;
}

OpRecord* VerbsTransport::RecordLocked(uint64_t id) {
  const uint64_t slot = id & kSlotMask;
  if (slot >= records_.size()) return nullptr;
  OpRecord* rec = records_[slot].get();
  return rec->in_use && rec->id == id ? rec : nullptr;
}

void VerbsTransport::FreeRecordLocked(OpRecord* rec) {
  // Cleared field by field, keeping the plan's vectors: a freed record allocates nothing the
  // next time it is used.
  rec->in_use = false;
  rec->ep = nullptr;
  rec->context = 0;
  rec->type = OpType::kSend;
  rec->completion_ep = nullptr;
  rec->plan.wrs.clear();
  rec->plan.sges.clear();
  rec->plan.bytes = 0;
  rec->next_wr = 0;
  rec->unreleased = 0;
  rec->owned.clear();
  rec->owned_mr = MemoryRegistration();
  free_records_.push_back(rec);
}

// No lock: an endpoint's transport (t_) is fixed at creation, a transport's endpoints stay in
// endpoints_ while the caller holds them (ReapLocked drops only endpoints nobody else holds),
// and peer_max_message_size_ is set before the endpoint is handed out. The classes are final:
// an exact typeid match replaces dynamic_cast (~90 instructions each, three per Op).
Status VerbsTransport::CheckOwnership(const Op& op, size_t index) const {
  const VerbsEndpoint* ep = nullptr;
  if (op.ep != nullptr) {
    if (typeid(*op.ep) != typeid(VerbsEndpoint) ||
        (ep = static_cast<const VerbsEndpoint*>(op.ep))->t_ != this) {
      return ForeignError(op, index, Foreign::kEndpoint);
    }
  }
  if (op.local == nullptr || typeid(*op.local) != typeid(VerbsMemoryRegion) ||
      static_cast<const VerbsMemoryRegion*>(op.local)->pd() != pd_.get()) {
    return ForeignError(op, index, Foreign::kLocalRegion);
  }
  if (op.remote != nullptr) {
    if (typeid(*op.remote) != typeid(VerbsRemoteKey) || op.ep == nullptr ||
        static_cast<const VerbsRemoteKey*>(op.remote)->endpoint_id != op.ep->id()) {
      return ForeignError(op, index, Foreign::kRemoteKey);
    }
  }
  if (ep != nullptr && ep->peer_max_message_size_ != 0) {
    return CheckPeerMessageLimit(op, index, ep->peer_max_message_size_);
  }
  return Status::Ok();
}

Status VerbsTransport::PostValidated(std::span<const Op> ops) {
  std::lock_guard<common::MaybeMutex> lock(mu_);
  Status st = Status::Ok();
  for (const Op& op : ops) {
    st = PostOneLocked(op);
    if (!st.ok()) break;
  }
  // Each endpoint's new work goes out once all of the call's Ops are queued: the Ops of one Post
  // to one peer share post-lists (one ibv_post_send and one signaled completion per list).
  for (VerbsEndpoint* ep : pump_queue_) {
    ep->pump_queued_ = false;
    PumpLocked(ep);
  }
  pump_queue_.clear();
  FlushRepostsLocked();
  return st;
}

Status VerbsTransport::PostOneLocked(const Op& op) {
  auto* ep = static_cast<VerbsEndpoint*>(op.ep);
  const auto* mr = static_cast<const VerbsMemoryRegion*>(op.local);
  auto fail_now = [&](const Status& s) {
    FailOpLocked(op.context, op.type, op.ep, s);
    return Status::Ok();
  };
  if (ep != nullptr && ep->state_ != VerbsEndpoint::State::kReady) {
    return fail_now(ep->status_.ok() ? Internal("endpoint is not connected") : ep->status_);
  }
  if (op.type == OpType::kRecv) {
    PendingRecv r{next_recv_seq_++, op.context, mr, op.local_offset, op.length};
    if (ep != nullptr) {
      ep->recvs_.push(r);
      DeliverLocked(ep);
    } else {
      shared_recvs_.push(r);
      for (auto& [id, other] : endpoints_) {
        if (!other->unexpected_.empty()) DeliverLocked(other.get());
      }
    }
    return Status::Ok();
  }

  OpRecord* fresh = NewRecordLocked(OpRecord::Kind::kUser, ep);
  if (fresh == nullptr) {
    return fail_now(ResourceExhausted("verbs: more than 16 M operations in flight"));
  }
  OpRecord& rec = *fresh;
  rec.context = op.context;
  rec.type = op.type;
  rec.completion_ep = op.ep;
  if (!PlanUserOp(op, &rec.plan)) {
    FreeRecordLocked(&rec);
    return Internal("unexpected op type in PostOneLocked");
  }
  if (rec.plan.wrs.empty()) {  // nothing to move (all segments empty): done now
    PushCompletionLocked(rec.context, rec.type, rec.completion_ep, rec.plan.bytes);
    FreeRecordLocked(&rec);
    return Status::Ok();
  }
  ep->backlog_.push(rec.id);
  if (!ep->pump_queued_) {
    ep->pump_queued_ = true;
    pump_queue_.push_back(ep);
  }
  return Status::Ok();
}

// The WRs of a user Op (a validated, owned, non-recv one); false for an op type with no plan.
bool VerbsTransport::PlanUserOp(const Op& op, WrPlan* plan) const {
  const auto* ep = static_cast<const VerbsEndpoint*>(op.ep);
  const auto* mr = static_cast<const VerbsMemoryRegion*>(op.local);
  const uint64_t local = reinterpret_cast<uintptr_t>(mr->data());
  const auto* key = static_cast<const VerbsRemoteKey*>(op.remote);
  const uint64_t max_wr = port_.max_msg_sz;
  switch (op.type) {
    case OpType::kSend:
      PlanSend(local + op.local_offset, op.length, mr->lkey(), ep->peer_.recv_buffer_size, kTagData,
               plan);
      break;
    case OpType::kWrite:
    case OpType::kRead:
      PlanContiguous(local + op.local_offset, op.length, mr->lkey(),
                     key->region().addr + op.remote_offset, key->rkey,
                     op.type == OpType::kWrite ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, max_wr,
                     plan);
      break;
    case OpType::kSparseWrite:
    case OpType::kSparseRead: {
      const bool write = op.type == OpType::kSparseWrite;
      PlanSparse(std::span<const Segment>(op.segments, op.num_segments), local, mr->lkey(),
                 key->region().addr, key->rkey, write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
                 write ? max_send_sge_ : max_read_sge_, max_wr, plan);
      PutFurthestFirst(plan);
      break;
    }
    default:
      return false;
  }
  if (op.flags & kOpNotify) {
    AddNotify(op.imm, key->region().addr + (op.type == OpType::kWrite ? op.remote_offset : 0),
              key->rkey, plan);
  }
  return true;
}

void VerbsTransport::PumpLocked(VerbsEndpoint* ep) {
  using State = VerbsEndpoint::State;
  const bool can_post =
      ep->state_ == State::kReady || ep->state_ == State::kHandshake || ep->lingering_;
  std::vector<size_t>& remaining = pump_remaining_;
  std::vector<BatchPiece>& pieces = pump_pieces_;
  while (can_post && ep->qp_ && !ep->backlog_.empty()) {
    remaining.clear();
    for (size_t i = 0; i < ep->backlog_.size() && i < kMaxPostList; ++i) {
      const OpRecord& rec = *RecordLocked(ep->backlog_[i]);
      remaining.push_back(rec.plan.wrs.size() - rec.next_wr);
    }
    PlanPostBatch(remaining, ep->sq_depth_ - ep->sq_used_, cq_budget_, kMaxPostList, kSignalEvery,
                  &pieces);
    if (pieces.empty()) {
      stats_.backlog_waits++;
      return;
    }
    const size_t total = BuildPostListLocked(ep, pieces);
    const int rc = PostSendTimedLocked(ep, total);
    if (rc != 0) {
      FailEndpointLocked(
          ep, VerbsError("ibv_post_send(" + std::to_string(total) + " WRs)", rc, ep->qpn()));
      return;
    }
    CommitPostedLocked(ep, pieces, total);
  }
}

// Fills pump_wrs_ with the batch's WRs, linked in order; every kSignalEvery-th and the last are
// signaled (wr_plan.h), each carrying in its wr_id the number of WRs (SQ slots) its completion
// retires. Fewer completions is the point: on a real HCA each is a CQE written over PCIe and
// polled, now per list of small Ops instead of per Op.
size_t VerbsTransport::BuildPostListLocked(VerbsEndpoint* ep, std::span<const BatchPiece> pieces) {
  std::vector<ibv_send_wr>& wrs = pump_wrs_;
  size_t total = 0;
  for (const BatchPiece& p : pieces) total += p.count;
  wrs.assign(total, ibv_send_wr{});
  size_t k = 0;
  size_t retired = 0;  // WRs retired by the list's signaled WRs so far
  for (const BatchPiece& p : pieces) {
    OpRecord& rec = *RecordLocked(ep->backlog_[p.op]);
    for (size_t j = 0; j < p.count; ++j, ++k) {
      const PlannedWr& pw = rec.plan.wrs[rec.next_wr + j];
      ibv_send_wr& wr = wrs[k];
      wr = MakeSendWr(pw, rec.plan.sges.data(), max_inline_);
      wr.wr_id = rec.id << 16;
      if (wr.send_flags & IBV_SEND_INLINE) stats_.inline_wrs++;
      if (pw.opcode == IBV_WR_RDMA_READ) stats_.rdma_reads++;
      if (IsSignaled(k, total, kSignalEvery)) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        wr.wr_id |= k + 1 - retired;
        retired = k + 1;
        stats_.signaled_wrs++;
      }
      stats_.max_sges_in_wr = std::max<uint64_t>(stats_.max_sges_in_wr, pw.num_sge);
      ep->inflight_bytes_ += pw.bytes;
      wr.next = k + 1 < total ? &wrs[k + 1] : nullptr;
    }
  }
  return total;
}

// Posts pump_wrs_ (`total` WRs), timed with the coarse clock (a vDSO read, no TSC: a few ns).
// Soft-RoCE in Linux 6.1 runs the QP's requester inside this call (rxe_post_send ->
// rxe_run_task in the caller's context) and loops for as long as the requester has work or ACK
// processing re-arms it: with traffic flowing both ways under emulation one call was measured at
// 118 s (1 of 80 repeats of the conformance peer-kill case; upstream rxe later bounds the loop,
// see docs/softroce.md). Nothing can be done from here but say so when it happens.
int VerbsTransport::PostSendTimedLocked(VerbsEndpoint* ep, size_t total) {
  ibv_send_wr* bad = nullptr;
  const int64_t before_ms = common::CoarseMs();
  int rc = ibv_post_send(ep->qp_.get(), pump_wrs_.data(), &bad);
  const uint64_t took_ms = static_cast<uint64_t>(common::CoarseMs() - before_ms);
  if (took_ms > stats_.longest_post_ms) {
    stats_.longest_post_ms = took_ms;
    if (took_ms * 2 > static_cast<uint64_t>(options_.peer_timeout.count())) {
      std::fprintf(stderr,
                   "ferry verbs: ibv_post_send of %zu WRs on %s %s took %llu ms (peer_timeout "
                   "%lld ms): the device does its protocol work inside the call (soft-RoCE)\n",
                   total, stats_.device.c_str(), QpName(ep->qpn()).c_str(),
                   static_cast<unsigned long long>(took_ms),
                   static_cast<long long>(options_.peer_timeout.count()));
    }
  }
  stats_.post_calls++;
  return rc;
}

// After a successful post: the SQ slots and CQ entries it holds, each record's progress, and the
// fully posted records leave the backlog.
void VerbsTransport::CommitPostedLocked(VerbsEndpoint* ep, std::span<const BatchPiece> pieces,
                                        size_t total) {
  stats_.wrs_posted += total;
  if (ep->sq_used_ == 0) ep->last_ack_ = common::CoarseNow();
  ep->sq_used_ += static_cast<uint32_t>(total);
  cq_budget_ -= static_cast<uint32_t>(SignaledWrs(total, kSignalEvery));
  for (const BatchPiece& p : pieces) {
    OpRecord& rec = *RecordLocked(ep->backlog_[p.op]);
    rec.next_wr += p.count;
    rec.unreleased += p.count;
    ep->posted_.Posted(rec.id, static_cast<uint32_t>(p.count));
  }
  while (!ep->backlog_.empty()) {
    const OpRecord& rec = *RecordLocked(ep->backlog_.front());
    if (rec.next_wr < rec.plan.wrs.size()) break;
    ep->backlog_.pop();
  }
}

void VerbsTransport::PollCqLocked() {
  if (cq_armed_) {
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    while (ibv_get_cq_event(channel_.get(), &ev_cq, &ev_ctx) == 0) {
      cq_armed_ = false;
      if (++cq_events_unacked_ >= 64) {
        ibv_ack_cq_events(cq_.get(), cq_events_unacked_);
        cq_events_unacked_ = 0;
      }
    }
  }
  ibv_wc wcs[kPollBatch];
  while (true) {
    int n = ibv_poll_cq(cq_.get(), kPollBatch, wcs);
    if (n < 0) {
      FailAllLocked(VerbsError("ibv_poll_cq", EIO));
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (wcs[i].wr_id & kRecvBit) {
        OnRecvCompletionLocked(wcs[i]);
      } else {
        OnSendCompletionLocked(wcs[i]);
      }
    }
    if (n < kPollBatch) break;
  }
  FlushRepostsLocked();
}

void VerbsTransport::OnSendCompletionLocked(const ibv_wc& wc) {
  const uint64_t id = wc.wr_id >> 16;
  const uint32_t retired = static_cast<uint32_t>(wc.wr_id & 0xffff);
  if (retired > 0) cq_budget_++;
  OpRecord* found = RecordLocked(id);
  if (found == nullptr) return;  // its endpoint already failed; nothing left to report
  VerbsEndpoint* ep = found->ep;
  if (wc.status != IBV_WC_SUCCESS) {
    // The WRs posted before the failed one completed (RC executes and completes them in order),
    // though no signaled completion said so: their Ops succeeded. The failed WR's Op and every
    // later one fail with the endpoint.
    ep->posted_.RetireBefore(id, [&](uint64_t done, uint32_t n) { RetireLocked(ep, done, n); });
    OpRecord& rec = *found;
    Status st = CompletionError(WrName(rec.type, rec.kind), wc.status, wc.vendor_err, wc.qp_num);
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      st = PeerFailure("queue pair flushed: " + st.message());
    }
    const bool linger = ep->lingering_;
    if (rec.kind == OpRecord::Kind::kUser) {
      FailOpLocked(rec.context, rec.type, rec.completion_ep, st);
      FreeRecordLocked(&rec);
    }
    if (linger) {
      TearDownLocked(ep);
    } else {
      FailEndpointLocked(ep, st.Annotate("endpoint to " + ep->peer_address() + " failed"));
    }
    return;
  }
  ep->last_heard_ = common::CoarseNow();
  ep->last_ack_ = ep->last_heard_;
  // The retired WRs are the oldest posted ones: earlier completions came first.
  ep->posted_.Retire(retired, [&](uint64_t done, uint32_t n) { RetireLocked(ep, done, n); });
  PumpLocked(ep);
}

void VerbsTransport::RetireLocked(VerbsEndpoint* ep, uint64_t id, uint32_t n) {
  ep->sq_used_ -= std::min(ep->sq_used_, n);
  OpRecord* found = RecordLocked(id);
  if (found == nullptr) return;  // failed and freed with its endpoint
  OpRecord& rec = *found;
  // They are the oldest posted WRs of its record.
  const size_t first = rec.next_wr - rec.unreleased;
  for (size_t i = first; i < first + n && i < rec.plan.wrs.size(); ++i) {
    ep->inflight_bytes_ -= std::min(ep->inflight_bytes_, rec.plan.wrs[i].bytes);
  }
  rec.unreleased -= std::min<size_t>(rec.unreleased, n);
  if (rec.next_wr == rec.plan.wrs.size() && rec.unreleased == 0) {
    if (rec.kind == OpRecord::Kind::kUser) {
      PushCompletionLocked(rec.context, rec.type, rec.completion_ep, rec.plan.bytes);
    }
    if (rec.kind == OpRecord::Kind::kHeartbeat) ep->hb_outstanding_ = false;
    FreeRecordLocked(&rec);
  }
}

void VerbsTransport::OnRecvCompletionLocked(const ibv_wc& wc) {
  const uint32_t buffer = static_cast<uint32_t>(wc.wr_id & 0xffffffffu);
  VerbsEndpoint* ep = EndpointByQpnLocked(wc.qp_num);
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status == IBV_WC_WR_FLUSH_ERR) return;  // the SRQ is going away
    RepostLocked(buffer);
    if (ep != nullptr) {
      FailEndpointLocked(ep, CompletionError("receive", wc.status, wc.vendor_err, wc.qp_num));
    }
    return;
  }
  if (ep == nullptr || (ep->state_ != VerbsEndpoint::State::kReady &&
                        ep->state_ != VerbsEndpoint::State::kHandshake)) {
    RepostLocked(buffer);
    return;
  }
  ep->last_heard_ = common::CoarseNow();
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    RepostLocked(buffer);
    if (ep->state_ != VerbsEndpoint::State::kReady) return;
    PushCompletionLocked(0, OpType::kNotify, ep, wc.byte_len).imm = ntohl(wc.imm_data);
    return;
  }
  const uint32_t tag = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
  if (wc.opcode == IBV_WC_RECV && (tag & ~0xffu) == kTagHandshake) {
    OnControlFragmentLocked(ep, pool_.buffer(buffer), wc.byte_len, tag & kLastFragment);
    RepostLocked(buffer);
    return;
  }
  if (wc.opcode != IBV_WC_RECV || (tag & ~0xffu) != kTagData ||
      ep->state_ != VerbsEndpoint::State::kReady) {
    RepostLocked(buffer);
    FailEndpointLocked(
        ep, ProtocolError("peer " + ep->peer_address() + " sent an unexpected message (opcode " +
                          std::to_string(wc.opcode) + ", tag " + std::to_string(tag) + ")"));
    return;
  }
  ep->unexpected_.push(Fragment{buffer, wc.byte_len, tag});
  DeliverLocked(ep);
}

bool VerbsTransport::TakeRecvLocked(VerbsEndpoint* ep, PendingRecv* out) {
  const bool own = !ep->recvs_.empty();
  const bool shared = !shared_recvs_.empty();
  if (!own && !shared) return false;
  if (own && (!shared || ep->recvs_.front().seq < shared_recvs_.front().seq)) {
    *out = ep->recvs_.pop();
  } else {
    *out = shared_recvs_.pop();
  }
  return true;
}

void VerbsTransport::DeliverLocked(VerbsEndpoint* ep) {
  while (!ep->unexpected_.empty() && ep->state_ == VerbsEndpoint::State::kReady) {
    if (!ep->assembling_) {
      PendingRecv r;
      if (!TakeRecvLocked(ep, &r)) return;
      ep->assembling_ = r;
      ep->assembled_ = 0;
      ep->discarding_ = false;
    }
    const Fragment f = ep->unexpected_.pop();
    PendingRecv& r = *ep->assembling_;
    if (!ep->discarding_ && ep->assembled_ + f.length > r.capacity) {
      ep->discarding_ = true;
    }
    if (!ep->discarding_ && f.length > 0) {
      std::memcpy(r.region->data() + r.offset + ep->assembled_, pool_.buffer(f.buffer), f.length);
    }
    ep->assembled_ += f.length;
    RepostLocked(f.buffer);
    if (ep->assembled_ > options_.max_message_size) {
      FailEndpointLocked(ep, ProtocolError("peer " + ep->peer_address() + " sent a message of " +
                                           "more than max_message_size (" +
                                           std::to_string(options_.max_message_size) + " bytes)"));
      return;
    }
    if (f.tag & kLastFragment) {
      Completion& c = PushCompletionLocked(r.context, OpType::kRecv, ep, ep->assembled_);
      if (ep->discarding_) {
        c.code = Code::kOutOfRange;
        c.error = "message of " + std::to_string(ep->assembled_) +
                  " bytes does not fit the receive buffer of " + std::to_string(r.capacity) +
                  " bytes; it was dropped";
      }
      ep->assembling_.reset();
      ep->discarding_ = false;
    }
  }
}

void VerbsTransport::RepostLocked(uint32_t buffer) {
  reposts_.push_back(buffer);
}

void VerbsTransport::FlushRepostsLocked() {
  if (reposts_.empty() || !srq_) return;
  std::vector<ibv_sge>& sges = repost_sges_;
  std::vector<ibv_recv_wr>& wrs = repost_wrs_;
  sges.resize(reposts_.size());
  wrs.assign(reposts_.size(), ibv_recv_wr{});
  for (size_t i = 0; i < reposts_.size(); ++i) {
    sges[i] =
        ibv_sge{reinterpret_cast<uintptr_t>(pool_.buffer(reposts_[i])), pool_.size(), pool_.lkey()};
    wrs[i].wr_id = kRecvBit | reposts_[i];
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_srq_recv(srq_.get(), wrs.data(), &bad);
  stats_.recv_reposts += reposts_.size();
  reposts_.clear();
  if (rc != 0) FailAllLocked(VerbsError("ibv_post_srq_recv", rc));
}

}  // namespace ferry::verbs
