// The data path: Post, UCX completion callbacks, Poll and Wait.
//
// Invariants:
//  - Every Op gets one OpState (pooled) and produces exactly one Completion (Finish()).
//  - UCX returns NULL for an operation that completed in the call; its callback then never
//    runs, so the Op is finished inline. A returned request always ends in exactly one callback.
//  - Puts/gets of a sparse list (and the put of a contiguous Write) carry no callback; their
//    requests are released at once (UCX frees them when done) and the Op's single completion is
//    the ucp_ep_flush_nbx that follows them: a flush completes after every earlier operation of
//    the endpoint has completed remotely, so a Write's completion means the data has landed.
//  - Tags: a message to a peer carries the id the peer gave us in its handshake, i.e. the
//    receiver's id of the sending endpoint.
#include <cstring>

#include "transport/ucx/ucx_status.h"
#include "transport/ucx/ucx_transport.h"

namespace ferry::ucx {
namespace {

constexpr ucp_tag_t kAnyTagMask = 0;
constexpr ucp_tag_t kExactTagMask = ~ucp_tag_t{0};

constexpr size_t kMaxDeferred = 1024;

bool IsWrite(OpType t) {
  return t == OpType::kWrite || t == OpType::kSparseWrite;
}

}  // namespace

// ---- op pool ----

OpState* UcxTransport::AllocOp() {
  if (op_free_.empty()) {
    op_storage_.push_back(std::make_unique<OpState>());
    op_free_.push_back(op_storage_.back().get());
  }
  OpState* st = op_free_.back();
  op_free_.pop_back();
  st->t = this;
  return st;
}

void UcxTransport::FreeOp(OpState* st) {
  *st = OpState{};
  op_free_.push_back(st);
}

void UcxTransport::LinkOp(UcxEndpoint* ep, OpState* st) {
  st->prev = nullptr;
  st->next = ep->ops_;
  if (ep->ops_ != nullptr) ep->ops_->prev = st;
  ep->ops_ = st;
  st->linked = true;
}

void UcxTransport::UnlinkOp(OpState* st) {
  if (!st->linked) return;
  if (st->prev != nullptr)
    st->prev->next = st->next;
  else
    st->ep->ops_ = st->next;
  if (st->next != nullptr) st->next->prev = st->prev;
  st->linked = false;
}

// ---- completion ----

void UcxTransport::CompleteNow(const Op& op, Status status) {
  Completion c;
  c.context = op.context;
  c.type = op.type;
  c.code = status.code();
  c.ep = op.ep;
  c.error = status.message();
  done_.push_back(std::move(c));
}

void UcxTransport::Finish(OpState* st, ucs_status_t status) {
  Report(st, status);
  FreeOp(st);
}

void UcxTransport::Report(OpState* st, ucs_status_t status) {
  Completion c;
  c.context = st->context;
  c.type = st->type;
  c.ep = st->sender != nullptr ? st->sender : st->ep;
  c.bytes = st->bytes;
  UcxEndpoint* ep = st->ep;
  if (status != UCS_OK) {
    Status s;
    if (ep != nullptr && ep->state_ == UcxEndpoint::State::kFailed) {
      s = ep->status_;  // peer failure, close (kCancelled), ...
    } else if (!st->cma_error.ok()) {
      s = st->cma_error;
    } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      s = OutOfRange("received a message longer than the posted buffer of " +
                     std::to_string(st->bytes) + " bytes (truncated)");
    } else if (status == UCS_ERR_CANCELED) {
      s = Cancelled("operation cancelled (transport shutting down)");
    } else {
      s = UcsError(std::string("ucx ") + std::string(OpTypeName(st->type)), status);
    }
    c.code = s.code();
    c.error = s.message();
    if (status != UCS_ERR_MESSAGE_TRUNCATED) c.bytes = 0;
  }
  if (ep != nullptr) --ep->outstanding_;
  UnlinkOp(st);
  done_.push_back(std::move(c));
}

void UcxTransport::OrphanOps(UcxEndpoint* ep) {
  while (ep->ops_ != nullptr) {
    OpState* st = ep->ops_;
    Report(st, UCS_ERR_CANCELED);  // the endpoint has failed: reports ep->status_
    st->orphaned = true;
  }
}

void UcxTransport::StepDone(OpState* st, ucs_status_t status) {
  if (status != UCS_OK && st->error == UCS_OK) st->error = status;
  if (st->stage == OpState::Stage::kMain && st->notify && st->error == UCS_OK) {
    if (st->ep->state_ != UcxEndpoint::State::kReady) {
      Finish(st, UCS_ERR_CANCELED);
      return;
    }
    SendNotify(st);
    return;
  }
  Finish(st, st->error);
}

void UcxTransport::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto* st = static_cast<OpState*>(user_data);
  ucp_request_free(request);
  if (st->orphaned) return st->t->FreeOp(st);
  st->t->StepDone(st, status);
}

void UcxTransport::OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) {
  auto* st = static_cast<OpState*>(user_data);
  UcxTransport* t = st->t;
  st->request = nullptr;
  if (st->orphaned) {
    ucp_request_free(request);
    return t->FreeOp(st);
  }
  if ((status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) && info != nullptr) {
    if (status == UCS_OK) st->bytes = info->length;
    auto it = t->by_id_.find(info->sender_tag);
    st->sender = it == t->by_id_.end() ? nullptr : it->second.get();
  }
  ucp_request_free(request);
  t->StepDone(st, status);
}

ucs_status_t UcxTransport::OnAmNotify(void* arg, const void* header, size_t header_length,
                                      void* /*data*/, size_t length,
                                      const ucp_am_recv_param_t* /*param*/) {
  auto* t = static_cast<UcxTransport*>(arg);
  // A notification that is malformed or names an endpoint that is not up is dropped: it cannot
  // be attributed, and the data it announces belongs to a peer we no longer serve.
  if (header_length != sizeof(NotifyHeader) || length != 0) return UCS_OK;
  NotifyHeader h;
  std::memcpy(&h, header, sizeof(h));
  auto it = t->live_.find(h.target_ep);
  // While our side still waits for UCX's wireup, the peer may be done and already notify.
  if (it == t->live_.end() ||
      (it->second->state_ != UcxEndpoint::State::kReady && !it->second->wiring_)) {
    return UCS_OK;
  }
  UcxEndpoint* ep = it->second;
  ep->last_heard_ = Clock::now();
  Completion c;
  c.type = OpType::kNotify;
  c.ep = ep;
  c.imm = h.imm;
  c.bytes = h.bytes;
  t->done_.push_back(std::move(c));
  return UCS_OK;
}

// ---- posting ----

Status UcxTransport::CheckOpOwnership(const Op& op, size_t index) const {
  const std::string who =
      "op " + std::to_string(index) + " (" + std::string(OpTypeName(op.type)) + ")";
  const UcxEndpoint* ep = nullptr;
  if (op.ep != nullptr) {
    ep = dynamic_cast<const UcxEndpoint*>(op.ep);
    if (ep == nullptr || ep->owner() != this) {
      return InvalidArgument(who + ": endpoint belongs to another transport");
    }
  }
  const auto* mr = dynamic_cast<const UcxMemoryRegion*>(op.local);
  if (mr == nullptr || mr->owner() != this) {
    return InvalidArgument(who + ": local region was not registered with this transport");
  }
  if (op.remote != nullptr && op.type != OpType::kSend && op.type != OpType::kRecv) {
    const auto* rk = dynamic_cast<const UcxRemoteKey*>(op.remote);
    if (rk == nullptr || rk->endpoint() != ep) {
      return InvalidArgument(who + ": remote key was not imported on this endpoint");
    }
  }
  if (op.type == OpType::kSend && ep != nullptr && ep->peer_max_message_ != 0 &&
      op.length > ep->peer_max_message_) {
    return InvalidArgument(who + ": " + std::to_string(op.length) +
                           " bytes exceed the peer's max_message_size of " +
                           std::to_string(ep->peer_max_message_));
  }
  return Status::Ok();
}

Status UcxTransport::Post(std::span<const Op> ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    FERRY_RETURN_IF_ERROR(ValidateOp(ops[i], caps_, options_.max_segments, i));
    FERRY_RETURN_IF_ERROR(CheckOpOwnership(ops[i], i));
  }
  bool any_done = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Op& op : ops) PostOne(op);
    any_done = !done_.empty();
  }
  if (progress_thread_.joinable()) {
    WakeProgressThread();
    if (any_done) cv_.notify_all();
  }
  return Status::Ok();
}

void UcxTransport::PostOne(const Op& op) {
  auto* ep = static_cast<UcxEndpoint*>(op.ep);
  if (ep != nullptr && ep->state_ != UcxEndpoint::State::kReady) {
    CompleteNow(op, ep->state_ == UcxEndpoint::State::kFailed
                        ? ep->status_
                        : Internal("endpoint is not connected"));
    return;
  }
  OpState* st = AllocOp();
  st->type = op.type;
  st->context = op.context;
  st->ep = ep;
  st->notify = (op.flags & kOpNotify) != 0;
  st->imm = op.imm;
  if (ep != nullptr) {
    LinkOp(ep, st);
    if (ep->outstanding_++ == 0) {
      // Liveness is measured from the moment there is something to wait for.
      ep->last_heard_ = ep->last_ping_ = Clock::now();
    }
  }
  switch (op.type) {
    case OpType::kSend: {
      st->bytes = op.length;
      ucp_request_param_t p{};
      p.op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
      p.cb.send = &UcxTransport::OnSendDone;
      p.user_data = st;
      p.memh = static_cast<const UcxMemoryRegion*>(op.local)->memh();
      ucs_status_ptr_t req = ucp_tag_send_nbx(ep->ep_.get(), op.local->data() + op.local_offset,
                                              op.length, ep->peer_tag_, &p);
      if (req == nullptr)
        StepDone(st, UCS_OK);
      else if (UCS_PTR_IS_ERR(req))
        StepDone(st, UCS_PTR_STATUS(req));
      return;
    }
    case OpType::kRecv:
      PostRecv(st, op);
      return;
    default:
      PostOneSided(st, op);
      return;
  }
}

void UcxTransport::PostRecv(OpState* st, const Op& op) {
  st->bytes = op.length;  // capacity until the message arrives
  ucp_tag_recv_info_t info{};
  ucp_request_param_t p{};
  // NO_IMM_CMPL: every receive ends in OnRecvDone with UCX's own recv info. A receive that
  // matched an unexpected message inside the call could otherwise complete with a zero length.
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FIELD_MEMH |
                   UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = &UcxTransport::OnRecvDone;
  p.user_data = st;
  p.recv_info.tag_info = &info;
  p.memh = static_cast<const UcxMemoryRegion*>(op.local)->memh();
  const ucp_tag_t tag = st->ep != nullptr ? st->ep->id() : 0;
  const ucp_tag_t mask = st->ep != nullptr ? kExactTagMask : kAnyTagMask;
  ucs_status_ptr_t req =
      ucp_tag_recv_nbx(worker_.get(), op.local->data() + op.local_offset, op.length, tag, mask, &p);
  if (req == nullptr) {  // matched an unexpected message and finished in the call
    st->bytes = info.length;
    auto it = by_id_.find(info.sender_tag);
    st->sender = it == by_id_.end() ? nullptr : it->second.get();
    StepDone(st, UCS_OK);
  } else if (UCS_PTR_IS_ERR(req)) {
    StepDone(st, UCS_PTR_STATUS(req));
  } else {
    st->request = req;
  }
}

void UcxTransport::PostOneSided(OpState* st, const Op& op) {
  const auto* rk = static_cast<const UcxRemoteKey*>(op.remote);
  UcxEndpoint* ep = st->ep;
  uint8_t* local = op.local->data();
  const uint64_t raddr = rk->region().addr;
  const bool write = IsWrite(op.type);
  const bool sparse = op.type == OpType::kSparseWrite || op.type == OpType::kSparseRead;

  // Same host: cross-memory attach, one system call per 1024 (merged) segments (cma.cc).
  if (ep->cma_pid_ > 0) {
    PostCma(st, op);
    return;
  }
  // No rc/dc verbs lane: UCX would emulate put/get in software (rma_sw.c), which writes any
  // address the peer names and aborts the process when its ack cannot reach a dead peer. Use
  // Ferry's own protocol over active messages instead.
  if (!ep->native_rma_) {
    PostAm(st, op);
    return;
  }

  ucp_request_param_t bare{};  // puts/gets without callbacks
  bare.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
  bare.memh = static_cast<const UcxMemoryRegion*>(op.local)->memh();
  ucp_ep_h h = ep->ep_.get();
  ucp_rkey_h rkey = rk->rkey();

  if (!sparse && !write) {
    st->bytes = op.length;
    ucp_request_param_t p = bare;
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxTransport::OnSendDone;
    p.user_data = st;
    ucs_status_ptr_t req =
        ucp_get_nbx(h, local + op.local_offset, op.length, raddr + op.remote_offset, rkey, &p);
    if (req == nullptr)
      StepDone(st, UCS_OK);
    else if (UCS_PTR_IS_ERR(req))
      StepDone(st, UCS_PTR_STATUS(req));
    return;
  }

  auto issue = [&](uint64_t lo, uint64_t ro, uint64_t len) -> ucs_status_t {
    ucs_status_ptr_t req = write ? ucp_put_nbx(h, local + lo, len, raddr + ro, rkey, &bare)
                                 : ucp_get_nbx(h, local + lo, len, raddr + ro, rkey, &bare);
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    ucp_request_free(req);  // released by UCX when done; the flush below is the completion
    return UCS_OK;
  };

  ucs_status_t status = UCS_OK;
  uint64_t total = 0;
  if (!sparse) {
    status = issue(op.local_offset, op.remote_offset, op.length);
    total = op.length;
  } else {
    // Merge runs that are adjacent on both sides: one put/get per run.
    const Segment* seg = op.segments;
    const size_t n = op.num_segments;
    for (size_t i = 0; i < n && status == UCS_OK;) {
      uint64_t lo = seg[i].local_offset, ro = seg[i].remote_offset, len = seg[i].length;
      size_t j = i + 1;
      while (j < n && seg[j].local_offset == lo + len && seg[j].remote_offset == ro + len) {
        len += seg[j].length;
        ++j;
      }
      if (len != 0) status = issue(lo, ro, len);
      total += len;
      i = j;
    }
  }
  st->bytes = total;
  if (status != UCS_OK) st->error = status;
  StartFlush(st);  // also after an error: earlier puts/gets must finish before the Op does
}

void UcxTransport::StartFlush(OpState* st) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &UcxTransport::OnSendDone;
  p.user_data = st;
  ucs_status_ptr_t req = ucp_ep_flush_nbx(st->ep->ep_.get(), &p);
  if (req == nullptr)
    StepDone(st, UCS_OK);
  else if (UCS_PTR_IS_ERR(req))
    StepDone(st, UCS_PTR_STATUS(req));
}

void UcxTransport::SendNotify(OpState* st) {
  st->stage = OpState::Stage::kNotify;
  st->header.target_ep = st->ep->peer_tag_;
  st->header.imm = st->imm;
  st->header.bytes = st->bytes;
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = &UcxTransport::OnSendDone;
  p.user_data = st;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t req = ucp_am_send_nbx(st->ep->ep_.get(), kAmNotify, &st->header,
                                         sizeof(st->header), nullptr, 0, &p);
  if (req == nullptr)
    StepDone(st, UCS_OK);
  else if (UCS_PTR_IS_ERR(req))
    StepDone(st, UCS_PTR_STATUS(req));
}

// ---- one-sided Ops over active messages ----
//
// Initiator: one kAmRmaRequest (eager, whole message) per Op; the Op completes when both the
// request's send has completed and the target's kAmRmaReply has arrived (or the endpoint fails).
// Target (OnAmRmaRequest): validates region (by epoch and address), bounds and rights with
// CheckRemoteAccess against its own registrations before touching memory, applies the write /
// gathers the read, and queues the reply (SendReplies, after worker progress).

void UcxTransport::PostAm(OpState* st, const Op& op) {
  const auto* rk = static_cast<const UcxRemoteKey*>(op.remote);
  UcxEndpoint* ep = st->ep;
  const bool write = IsWrite(op.type);
  uint8_t* local = op.local->data();
  st->local_base = local;
  uint64_t total = 0;
  ForEachMergedRun(op, [&](uint64_t lo, uint64_t ro, uint64_t len) {
    if (len == 0) return true;
    st->table.push_back(RmaSegment{ro, len});
    if (write)
      st->iov.push_back(ucp_dt_iov_t{local + lo, len});
    else
      st->local_segs.push_back(RmaSegment{lo, len});
    total += len;
    return true;
  });
  st->bytes = total;
  if (st->table.empty()) {  // nothing to move (all segments empty)
    if (st->notify) {
      SendNotify(st);
    } else {
      Finish(st, UCS_OK);
    }
    return;
  }
  st->rma.target_ep = ep->peer_tag_;
  st->rma.req_id = next_req_id_++;
  st->rma.region_addr = rk->region().addr;
  st->rma.epoch = rk->region().epoch;
  st->rma.key = rk->key();
  st->rma.total = total;
  st->rma.num_segments = static_cast<uint32_t>(st->table.size());
  st->rma.write = write ? 1 : 0;
  st->rma.notify = st->notify ? 1 : 0;
  st->rma.imm = st->imm;
  st->notify = false;  // the target queues the kNotify itself once the data has landed
  st->iov.insert(st->iov.begin(),
                 ucp_dt_iov_t{st->table.data(), st->table.size() * sizeof(RmaSegment)});
  st->send_pending = true;
  st->reply_pending = true;
  am_ops_[st->rma.req_id] = st;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE;
  p.cb.send = &UcxTransport::OnAmRmaSent;
  p.user_data = st;
  p.flags = UCP_AM_SEND_FLAG_EAGER;  // whole message in the target's handler, no rendezvous
  p.datatype = ucp_dt_make_iov();
  ucs_status_ptr_t req = ucp_am_send_nbx(ep->ep_.get(), kAmRmaRequest, &st->rma, sizeof(st->rma),
                                         st->iov.data(), st->iov.size(), &p);
  if (req == nullptr) {
    OnAmRmaSent(nullptr, UCS_OK, st);
  } else if (UCS_PTR_IS_ERR(req)) {
    OnAmRmaSent(nullptr, UCS_PTR_STATUS(req), st);
  }
}

void UcxTransport::OnAmRmaSent(void* request, ucs_status_t status, void* user_data) {
  auto* st = static_cast<OpState*>(user_data);
  UcxTransport* t = st->t;
  if (request != nullptr) ucp_request_free(request);
  if (st->orphaned) return t->FreeOp(st);
  st->send_pending = false;
  if (status != UCS_OK) {
    if (st->error == UCS_OK) st->error = status;
    if (st->reply_pending) {  // the request never left: no reply will come
      st->reply_pending = false;
      t->am_ops_.erase(st->rma.req_id);
    }
  }
  if (!st->reply_pending) t->AmFinish(st);
}

void UcxTransport::AmFinish(OpState* st) {
  Finish(st, st->error);
}

void UcxTransport::FailAmOps(UcxEndpoint* ep) {
  std::vector<OpState*> ops;
  for (auto& [id, st] : am_ops_) {
    if (st->ep == ep) ops.push_back(st);
  }
  for (OpState* st : ops) {
    am_ops_.erase(st->rma.req_id);
    st->reply_pending = false;
    if (st->error == UCS_OK) st->error = UCS_ERR_CANCELED;  // Finish reports ep->status_
    // A request still being sent completes (with an error) when UCX closes the ep.
    if (!st->send_pending) AmFinish(st);
  }
}

namespace {

std::unique_ptr<PendingReply> ErrorReply(UcxTransport* t, uint64_t ep_id, const RmaHeader& h,
                                         const Status& s) {
  auto r = std::make_unique<PendingReply>();
  r->t = t;
  r->ep_id = ep_id;
  r->header.req_id = h.req_id;
  r->header.code = static_cast<uint32_t>(s.code());
  const std::string& m = s.message();
  r->data.assign(m.begin(), m.begin() + static_cast<ptrdiff_t>(std::min<size_t>(m.size(), 512)));
  return r;
}

}  // namespace

ucs_status_t UcxTransport::OnAmRmaRequest(void* arg, const void* header, size_t header_length,
                                          void* data, size_t length,
                                          const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  // Unattributable requests (bad header, unknown or failed endpoint) are dropped: there is no
  // one to answer.
  if (header_length != sizeof(RmaHeader)) return UCS_OK;
  RmaHeader h;
  std::memcpy(&h, header, sizeof(h));
  auto it = t->live_.find(h.target_ep);
  if (it == t->live_.end()) return UCS_OK;
  UcxEndpoint* ep = it->second;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    if (ep->state_ == UcxEndpoint::State::kReady) {
      t->replies_.push_back(
          ErrorReply(t, ep->id(), h,
                     ProtocolError("ucx: one-sided request from " + ep->peer_address_ +
                                   " came as rendezvous, expected eager")));
    }
    return UCS_OK;
  }
  if (ep->state_ == UcxEndpoint::State::kHandshaking) {
    // The peer finished its side of the handshake first and already sent work; keep a copy
    // until ours is done (ProgressLocked), then serve it. Bounded: beyond the limit a peer
    // that floods us before our handshake ends is ignored (those Ops of its never complete
    // until it closes or loses the endpoint).
    if (t->deferred_.size() >= kMaxDeferred) return UCS_OK;
    DeferredRequest d;
    d.header = h;
    const auto* b = static_cast<const uint8_t*>(data);
    d.data.assign(b, b + length);
    t->deferred_.push_back(std::move(d));
    return UCS_OK;
  }
  t->ServeRmaRequest(ep, h, static_cast<const uint8_t*>(data), length);
  return UCS_OK;
}

void UcxTransport::ServeDeferred() {
  std::vector<DeferredRequest> keep;
  std::vector<DeferredRequest> all;
  all.swap(deferred_);
  for (DeferredRequest& d : all) {
    auto it = live_.find(d.header.target_ep);
    if (it == live_.end()) continue;  // the endpoint failed meanwhile
    if (it->second->state_ != UcxEndpoint::State::kReady) {
      keep.push_back(std::move(d));
      continue;
    }
    ServeRmaRequest(it->second, d.header, d.data.data(), d.data.size());
  }
  for (DeferredRequest& d : keep) deferred_.push_back(std::move(d));
}

void UcxTransport::ServeRmaRequest(UcxEndpoint* ep, const RmaHeader& h, const uint8_t* bytes,
                                   size_t length) {
  UcxTransport* t = this;
  ep->last_heard_ = Clock::now();
  const std::string who = "ucx: one-sided request from " + ep->peer_address_;
  auto fail = [&](Status s) { t->replies_.push_back(ErrorReply(t, ep->id(), h, s)); };
  if (h.num_segments == 0 || length / sizeof(RmaSegment) < h.num_segments) {
    return fail(ProtocolError(who + ": bad segment table (" + std::to_string(h.num_segments) +
                              " segments, " + std::to_string(length) + " bytes)"));
  }
  const size_t table_bytes = size_t{h.num_segments} * sizeof(RmaSegment);
  uint64_t total = 0;
  for (uint32_t i = 0; i < h.num_segments; ++i) {
    RmaSegment s;
    std::memcpy(&s, bytes + i * sizeof(RmaSegment), sizeof(s));
    if (total + s.length < total) return fail(ProtocolError(who + ": segment lengths overflow"));
    total += s.length;
  }
  if (total != h.total || (h.write && length - table_bytes != total) ||
      (!h.write && length != table_bytes)) {
    return fail(ProtocolError(who + ": payload of " + std::to_string(length) +
                              " bytes does not match its segment table"));
  }
  auto rit = t->regions_.find(h.epoch);
  if (rit == t->regions_.end() || rit->second->descriptor().addr != h.region_addr) {
    return fail(Stale(who + ": names no current registration (deregistered or forged key)"));
  }
  UcxMemoryRegion* mr = rit->second;
  if (h.key != mr->key()) {
    return fail(PermissionDenied(who + ": wrong key for the registration it names"));
  }
  const uint32_t needed = h.write ? kAccessRemoteWrite : kAccessRemoteRead;
  for (uint32_t i = 0; i < h.num_segments; ++i) {
    RmaSegment s;
    std::memcpy(&s, bytes + i * sizeof(RmaSegment), sizeof(s));
    Status ok = CheckRemoteAccess(mr->size(), mr->access(), s.remote_offset, s.length, needed);
    if (!ok.ok()) return fail(ok.Annotate(who));
  }
  auto r = std::make_unique<PendingReply>();
  r->t = t;
  r->ep_id = ep->id();
  r->header.req_id = h.req_id;
  r->header.bytes = total;
  const uint8_t* src = bytes + table_bytes;
  for (uint32_t i = 0; i < h.num_segments; ++i) {
    RmaSegment s;
    std::memcpy(&s, bytes + i * sizeof(RmaSegment), sizeof(s));
    if (h.write) {
      std::memcpy(mr->data() + s.remote_offset, src, s.length);
      src += s.length;
    } else if (s.length > 0) {
      // A read replies straight from the region: an iov per run of adjacent segments.
      uint8_t* p = mr->data() + s.remote_offset;
      if (!r->iov.empty() &&
          static_cast<uint8_t*>(r->iov.back().buffer) + r->iov.back().length == p) {
        r->iov.back().length += s.length;
      } else {
        r->iov.push_back(ucp_dt_iov_t{p, s.length});
      }
    }
  }
  if (!r->iov.empty()) {
    r->region = mr;
    ++mr->replies_in_flight_;
  }
  if (h.write && h.notify) {
    Completion c;
    c.type = OpType::kNotify;
    c.ep = ep;
    c.imm = h.imm;
    c.bytes = total;
    t->done_.push_back(std::move(c));
  }
  t->replies_.push_back(std::move(r));
}

void UcxTransport::SendReplies() {
  std::vector<std::unique_ptr<PendingReply>> replies;
  replies.swap(replies_);
  for (auto& r : replies) {
    auto it = live_.find(r->ep_id);
    if (it == live_.end() || it->second->state_ != UcxEndpoint::State::kReady) continue;
    UcxEndpoint* ep = it->second;
    r->header.target_ep = ep->peer_tag_;
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = &UcxTransport::OnReplySent;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    PendingReply* raw = r.get();
    p.user_data = raw;
    const void* buffer = raw->data.data();
    size_t count = raw->data.size();
    if (!raw->iov.empty()) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
      p.datatype = ucp_dt_make_iov();
      buffer = raw->iov.data();
      count = raw->iov.size();
    }
    ucs_status_ptr_t req = ucp_am_send_nbx(ep->ep_.get(), kAmRmaReply, &raw->header,
                                           sizeof(raw->header), buffer, count, &p);
    // Done at once or failed (the peer is gone: nothing to tell it): drop the reply. In flight:
    // OnReplySent frees it, with any status (an error never aborts anything).
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) replies_sending_.insert(r.release());
  }
}

void UcxTransport::DrainRepliesFrom(UcxMemoryRegion* mr) {
  for (auto& r : replies_) {
    if (r->region != mr) continue;
    r->iov.clear();
    r->region = nullptr;
    --mr->replies_in_flight_;
    const std::string m = "ucx: the region was deregistered while this read was being served";
    r->header.code = static_cast<uint32_t>(Code::kStale);
    r->header.bytes = 0;
    r->data.assign(m.begin(), m.end());
  }
  auto deadline = Clock::now() + options_.peer_timeout;
  while (mr->replies_in_flight_ > 0 && Clock::now() < deadline) ProgressLocked();
  if (mr->replies_in_flight_ == 0) return;
  std::vector<uint64_t> stuck;
  for (PendingReply* r : replies_sending_) {
    if (r->region == mr) stuck.push_back(r->ep_id);
  }
  for (uint64_t id : stuck) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    FailEndpoint(it->second,
                 PeerFailure("ucx: the peer did not take a read reply within peer_timeout while "
                             "the region it reads was being deregistered"),
                 /*graceful=*/false);
  }
  deadline = Clock::now() + options_.peer_timeout;
  while (mr->replies_in_flight_ > 0 && Clock::now() < deadline) ProgressLocked();
  // Sends UCX still has not completed even then: detach them, so that their late completion
  // (at the latest when the worker is destroyed) does not count into a region that is gone.
  for (PendingReply* r : replies_sending_) {
    if (r->region != mr) continue;
    r->region = nullptr;
    --mr->replies_in_flight_;
  }
}

PendingReply::~PendingReply() {
  if (region != nullptr) --region->replies_in_flight_;  // under mu_, like every reply's life
}

void UcxTransport::OnReplySent(void* request, ucs_status_t /*status*/, void* user_data) {
  ucp_request_free(request);
  auto* r = static_cast<PendingReply*>(user_data);
  r->t->replies_sending_.erase(r);
  delete r;
}

ucs_status_t UcxTransport::OnAmRmaReply(void* arg, const void* header, size_t header_length,
                                        void* data, size_t length,
                                        const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  if (header_length != sizeof(RmaReplyHeader)) return UCS_OK;
  RmaReplyHeader h;
  std::memcpy(&h, header, sizeof(h));
  auto eit = t->live_.find(h.target_ep);
  if (eit == t->live_.end()) return UCS_OK;
  UcxEndpoint* ep = eit->second;
  auto it = t->am_ops_.find(h.req_id);
  if (it == t->am_ops_.end() || it->second->ep != ep) return UCS_OK;  // unknown or forged
  ep->last_heard_ = Clock::now();
  OpState* st = it->second;
  t->am_ops_.erase(it);
  st->reply_pending = false;
  const std::string who = "ucx: reply from " + ep->peer_address_;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    st->cma_error = ProtocolError(who + " came as rendezvous, expected eager");
  } else if (h.code != 0) {
    const auto code = h.code <= static_cast<uint32_t>(Code::kInternal) ? static_cast<Code>(h.code)
                                                                       : Code::kProtocol;
    const auto* text = static_cast<const char*>(data);
    st->cma_error = Status(code, "target refused the " + std::string(OpTypeName(st->type)) + ": " +
                                     std::string(text, text + std::min<size_t>(length, 512)));
  } else if (h.bytes != st->bytes || (st->rma.write ? length != 0 : length != st->bytes)) {
    st->cma_error =
        ProtocolError(who + ": " + std::to_string(length) + " bytes do not match the request of " +
                      std::to_string(st->bytes));
  } else if (!st->rma.write) {
    const auto* src = static_cast<const uint8_t*>(data);
    for (const RmaSegment& s : st->local_segs) {
      std::memcpy(st->local_base + s.remote_offset, src, s.length);  // remote_offset = local
      src += s.length;
    }
  }
  if (!st->cma_error.ok() && st->error == UCS_OK) st->error = UCS_ERR_IO_ERROR;
  if (!st->send_pending) t->AmFinish(st);
  return UCS_OK;
}

// ---- reaping ----

size_t UcxTransport::Poll(std::span<Completion> out) {
  std::lock_guard<std::mutex> lock(mu_);
  ProgressLocked();
  size_t n = 0;
  while (n < out.size() && !done_.empty()) out[n++] = done_.pop_front();
  return n;
}

Status UcxTransport::Wait(Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  auto woken = [this] { return wake_requested_.exchange(false, std::memory_order_acq_rel); };
  if (progress_thread_.joinable()) {
    if (cv_.wait_until(lock, deadline, [&] { return !done_.empty() || woken(); })) {
      return Status::Ok();
    }
    return Timeout("ucx: no completion within " + std::to_string(timeout.count()) + " ms");
  }
  // Spin briefly (cheap for short waits), then sleep on the worker's event fd.
  const auto spin_until = Clock::now() + std::chrono::microseconds(50);
  while (true) {
    ProgressLocked();
    if (!done_.empty() || woken()) return Status::Ok();
    const auto now = Clock::now();
    if (now >= deadline) {
      return Timeout("ucx: no completion within " + std::to_string(timeout.count()) + " ms");
    }
    if (now < spin_until) continue;
    SleepOnWorker(lock, deadline);
  }
}

void UcxTransport::Wake() {
  wake_requested_.store(true, std::memory_order_release);
  if (progress_thread_.joinable()) {
    std::lock_guard<std::mutex> lock(mu_);  // orders the flag before a waiter's predicate check
    cv_.notify_all();
    return;
  }
  // Unblocks a poll() on the worker's event fd (SleepOnWorker); a waiter without an armed fd
  // sleeps at most 2 ms and sees the flag on its next turn.
  if (efd_ >= 0) ucp_worker_signal(worker_.get());
}

}  // namespace ferry::ucx
