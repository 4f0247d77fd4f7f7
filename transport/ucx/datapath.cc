// The data path: Post, tag send/recv, the one-sided dispatch (same-host engine, native RMA over
// an rc/dc lane; path 3 is emulated_rma.cc), UCX completion callbacks, Poll and Wait.
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
#include <typeinfo>

#include "transport/common/coarse_clock.h"
#include "transport/common/merged_runs.h"
#include "transport/ucx/errors.h"
#include "transport/ucx/ucx_transport.h"

namespace ferry::ucx {
namespace {

constexpr ucp_tag_t kAnyTagMask = 0;
constexpr ucp_tag_t kExactTagMask = ~ucp_tag_t{0};

}  // namespace

// ---- op pool ----

OpState* UcxTransport::AllocOp() {
  if (op_free_.empty()) {
    op_storage_.push_back(std::make_unique<OpState>());
    op_storage_.back()->slot = static_cast<uint32_t>(op_storage_.size() - 1);
    op_free_.push_back(op_storage_.back().get());
  }
  OpState* st = op_free_.back();
  op_free_.pop_back();
  st->t = this;
  ++st->gen;
  return st;
}

void OpState::Reset() {
  // Field by field, not `*this = OpState{}`: assigning a fresh state freed the vectors of the
  // emulated path (am), so every Op of path (3) allocated them again. Capacity is kept.
  type = OpType::kSend;
  stage = Stage::kMain;
  notify = false;
  imm = 0;
  context = 0;
  ep = nullptr;
  sender = nullptr;
  bytes = 0;
  request = nullptr;
  error = UCS_OK;
  if (!cma_error.ok()) cma_error = Status::Ok();
  header = NotifyHeader{};
  am.Reset();
  prev = next = nullptr;
  linked = false;
  orphaned = false;
}

void UcxTransport::FreeOp(OpState* st) {
  st->Reset();
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

// Completions are filled in place in the ring's (reused) slot: no Completion is built and moved.
Completion& UcxTransport::PushCompletion(uint64_t context, OpType type, Endpoint* ep,
                                         uint64_t bytes) {
  Completion& c = done_.push();
  c.context = context;
  c.type = type;
  c.ep = ep;
  c.bytes = bytes;
  return c;
}

void UcxTransport::CompleteNow(const Op& op, const Status& status) {
  Completion& c = PushCompletion(op.context, op.type, op.ep, 0);
  c.code = status.code();
  if (!status.ok()) c.error = status.message();
}

void UcxTransport::Finish(OpState* st, ucs_status_t status) {
  Report(st, status);
  FreeOp(st);
}

void UcxTransport::Report(OpState* st, ucs_status_t status) {
  UcxEndpoint* ep = st->ep;
  Completion& c =
      PushCompletion(st->context, st->type, st->sender != nullptr ? st->sender : ep, st->bytes);
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
  ep->last_heard_ = common::CoarseNow();
  t->PushCompletion(0, OpType::kNotify, ep, h.bytes).imm = h.imm;
  return UCS_OK;
}

// ---- posting ----

// No lock: an endpoint's and a key's owner are fixed at creation, and peer_max_message_ is set
// before the endpoint is handed out. The classes are final, so an exact typeid match (a vtable
// load and a pointer compare) decides what dynamic_cast did at ~90 instructions a call, three
// times per Op (callgrind, ucx shm ping-pong).
Status UcxTransport::CheckOwnership(const Op& op, size_t index) const {
  const UcxEndpoint* ep = nullptr;
  if (op.ep != nullptr) {
    if (typeid(*op.ep) != typeid(UcxEndpoint) ||
        (ep = static_cast<const UcxEndpoint*>(op.ep))->owner() != this) {
      return ForeignError(op, index, Foreign::kEndpoint);
    }
  }
  if (op.local == nullptr || typeid(*op.local) != typeid(UcxMemoryRegion) ||
      static_cast<const UcxMemoryRegion*>(op.local)->owner() != this) {
    return ForeignError(op, index, Foreign::kLocalRegion);
  }
  if (op.remote != nullptr && op.type != OpType::kSend && op.type != OpType::kRecv) {
    if (typeid(*op.remote) != typeid(UcxRemoteKey) ||
        static_cast<const UcxRemoteKey*>(op.remote)->endpoint() != ep) {
      return ForeignError(op, index, Foreign::kRemoteKey);
    }
  }
  if (ep != nullptr && ep->peer_max_message_ != 0) {
    return CheckPeerMessageLimit(op, index, ep->peer_max_message_);
  }
  return Status::Ok();
}

Status UcxTransport::PostValidated(std::span<const Op> ops) {
  bool any_done = false;
  {
    Guard lock(mu_);
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
  // A same-host write or read without notification is done when Transfer returns: it needs no
  // Op state, no link on the endpoint and no liveness stamp.
  if (ep != nullptr && ep->samehost_.valid() && !(op.flags & kOpNotify) &&
      op.type != OpType::kSend && op.type != OpType::kRecv) {
    PostSameHostInline(op);
    return;
  }
  OpState* st = AllocOp();
  st->type = op.type;
  st->context = op.context;
  st->ep = ep;
  st->notify = (op.flags & kOpNotify) != 0;
  st->imm = op.imm;
  if (op.type == OpType::kSend) {
    PostSend(st, op);
    return;
  }
  if (ep != nullptr) Track(ep, st);
  switch (op.type) {
    case OpType::kRecv:
      PostRecv(st, op);
      return;
    default:
      PostOneSided(st, op);
      return;
  }
}

void UcxTransport::Track(UcxEndpoint* ep, OpState* st) {
  LinkOp(ep, st);
  if (ep->outstanding_++ == 0) {
    // Liveness is measured from the moment there is something to wait for.
    ep->last_heard_ = ep->last_ping_ = common::CoarseNow();
  }
}

void UcxTransport::PostSend(OpState* st, const Op& op) {
  UcxEndpoint* ep = st->ep;
  st->bytes = op.length;
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
  p.cb.send = &UcxTransport::OnSendDone;
  p.user_data = st;
  p.memh = static_cast<const UcxMemoryRegion*>(op.local)->memh();
  ucs_status_ptr_t req = ucp_tag_send_nbx(ep->ep_.get(), op.local->data() + op.local_offset,
                                          op.length, ep->peer_tag_, &p);
  if (req == nullptr) {
    // Sent within the call (an eager send over shm, the common small message): UCX will never
    // call back, so the Op is done without being tracked on its endpoint.
    PushCompletion(op.context, OpType::kSend, op.ep, op.length);
    FreeOp(st);
    return;
  }
  Track(ep, st);  // before StepDone, which untracks it
  if (UCS_PTR_IS_ERR(req)) StepDone(st, UCS_PTR_STATUS(req));
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

  // Same host: the same-host engine (transport/samehost/): checked against the target's
  // table, then memcpy through a shared mapping or cross-memory attach.
  if (ep->samehost_.valid()) {
    PostSameHost(st, op);
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

  // One put/get per run of segments adjacent on both sides (a contiguous op is one run).
  ucs_status_t status = UCS_OK;
  uint64_t total = 0;
  common::ForEachMergedRun(op, [&](uint64_t lo, uint64_t ro, uint64_t len) {
    if (len != 0 || !sparse) status = issue(lo, ro, len);
    total += len;
    return status == UCS_OK;
  });
  st->bytes = total;
  if (status != UCS_OK) st->error = status;
  StartFlush(st);  // also after an error: earlier puts/gets must finish before the Op does
}

void UcxTransport::PostSameHost(OpState* st, const Op& op) {
  const auto* rk = static_cast<const UcxRemoteKey*>(op.remote);
  UcxEndpoint* ep = st->ep;
  const Status s = ep->samehost_.Transfer(op, rk->region(), rk->key(), &rk->samehost_, &st->bytes);
  if (s.ok()) {
    StepDone(st, UCS_OK);
    return;
  }
  if (s.code() == Code::kPeerFailure) {  // the peer process is gone
    FailEndpoint(ep, s.Annotate("peer " + ep->peer_address_), /*graceful=*/false);
    Finish(st, UCS_ERR_CONNECTION_RESET);
    return;
  }
  // Refused by the target's table, or the memory is gone: this Op failed, the endpoint stays.
  st->cma_error = s.Annotate("ucx: one-sided access to " + ep->peer_address_);
  Finish(st, UCS_ERR_IO_ERROR);
}

void UcxTransport::PostSameHostInline(const Op& op) {
  auto* ep = static_cast<UcxEndpoint*>(op.ep);
  const auto* rk = static_cast<const UcxRemoteKey*>(op.remote);
  uint64_t bytes = 0;
  const Status s = ep->samehost_.Transfer(op, rk->region(), rk->key(), &rk->samehost_, &bytes);
  if (s.ok()) {
    PushCompletion(op.context, op.type, op.ep, bytes);
    return;
  }
  // As PostSameHost: a vanished peer fails the endpoint, anything else fails this Op only.
  if (s.code() == Code::kPeerFailure) {
    FailEndpoint(ep, s.Annotate("peer " + ep->peer_address_), /*graceful=*/false);
    CompleteNow(op, ep->status_);
    return;
  }
  CompleteNow(op, s.Annotate("ucx: one-sided access to " + ep->peer_address_));
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
  ucp_request_param_t p = EagerAmParams(&UcxTransport::OnSendDone, st);
  ucs_status_ptr_t req = ucp_am_send_nbx(st->ep->ep_.get(), kAmNotify, &st->header,
                                         sizeof(st->header), nullptr, 0, &p);
  if (req == nullptr)
    StepDone(st, UCS_OK);
  else if (UCS_PTR_IS_ERR(req))
    StepDone(st, UCS_PTR_STATUS(req));
}

// ---- reaping ----

size_t UcxTransport::Poll(std::span<Completion> out) {
  // kMulti: a thread that finds the lock taken leaves progress to its holder instead of queueing
  // behind it (the PS's control pump polls the data transport its owner is busy polling); under
  // kSingle the lock is a no-op and always "taken" here. With a progress thread, the holder is
  // that thread and what it reaped is queued for the caller, so the caller waits for the lock:
  // a Wait() that returned for a queued completion must be followed by a Poll that returns it.
  Lock lock(mu_, std::defer_lock);
  if (options_.progress_thread) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return 0;
  }
  // What is queued already (an inline same-host completion, or the last progress round's) is
  // returned first; progress runs when nothing is, so a Post+Poll pair pays one worker progress.
  if (done_.empty() || out.empty()) ProgressLocked();
  size_t n = 0;
  while (n < out.size() && !done_.empty()) out[n++] = done_.pop();
  return n;
}

Status UcxTransport::Wait(Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  Lock lock(mu_);
  auto woken = [this] { return wake_requested_.exchange(false, std::memory_order_acq_rel); };
  if (progress_thread_.joinable()) {
    if (cv_.wait_until(lock, deadline, [&] { return !done_.empty() || woken(); })) {
      return Status::Ok();
    }
    return Timeout("wait timed out");  // short: no allocation (transport.h)
  }
  // Spin briefly (cheap for short waits), then sleep on the worker's event fd.
  const auto spin_until = Clock::now() + std::chrono::microseconds(50);
  while (true) {
    ProgressLocked();
    if (!done_.empty() || woken()) return Status::Ok();
    const auto now = Clock::now();
    if (now >= deadline) {
      return Timeout("wait timed out");  // short: no allocation (transport.h)
    }
    if (now < spin_until) continue;
    SleepOnWorker(lock, deadline);
  }
}

void UcxTransport::Wake() {
  wake_requested_.store(true, std::memory_order_release);
  if (progress_thread_.joinable()) {
    Guard lock(mu_);  // orders the flag before a waiter's predicate check
    cv_.notify_all();
    return;
  }
  // Unblocks a poll() on the worker's event fd (SleepOnWorker); a waiter without an armed fd
  // sleeps at most 2 ms and sees the flag on its next turn.
  if (efd_ >= 0) ucp_worker_signal(worker_.get());
}

}  // namespace ferry::ucx
