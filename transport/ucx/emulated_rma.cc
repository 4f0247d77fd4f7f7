// Path (3): one-sided Ops over active messages, initiator and target (protocol and reasons in
// emulated_rma.h; wire layout in wire.h).
#include <cstring>

#include "transport/common/coarse_clock.h"
#include "transport/common/copy_row.h"
#include "transport/common/merged_runs.h"
#include "transport/common/segment_check.h"
#include "transport/common/segment_codec.h"
#include "transport/ucx/errors.h"
#include "transport/ucx/ucx_transport.h"

namespace ferry::ucx {
namespace {

constexpr size_t kMaxDeferred = 1024;

// Request id = the Op's pool slot and its generation: unique while the Op waits, and a reply
// that names a recycled slot carries an old generation.
uint64_t ReqId(const OpState* st) {
  return (uint64_t{st->gen} << 32) | st->slot;
}

}  // namespace

void EmulatedOp::Reset() {
  rma = RmaHeader{};
  runs.clear();
  table.clear();
  iov.clear();
  local_segs.clear();
  local_base = nullptr;
  send_pending = false;
  reply_pending = false;
}

OpState* UcxTransport::AmOpFor(uint64_t req_id, const UcxEndpoint* ep) {
  const uint64_t slot = req_id & 0xffffffffu;
  if (slot >= op_storage_.size()) return nullptr;
  OpState* st = op_storage_[slot].get();
  if (!st->am.reply_pending || ReqId(st) != req_id || st->ep != ep) return nullptr;
  return st;
}

// ---- initiator ----

void UcxTransport::PostAm(OpState* st, const Op& op) {
  const auto* rk = static_cast<const UcxRemoteKey*>(op.remote);
  UcxEndpoint* ep = st->ep;
  const bool write = IsWrite(op.type);
  uint8_t* local = op.local->data();
  st->am.local_base = local;
  uint64_t total = 0;
  // iov slot 0 is the table, filled in below.
  st->am.iov.push_back(ucp_dt_iov_t{nullptr, 0});
  common::ForEachMergedRun(op, [&](uint64_t lo, uint64_t ro, uint64_t len) {
    if (len == 0) return true;
    st->am.runs.push_back(Segment{lo, ro, len});
    total += len;
    // The local side, merged wherever it is adjacent: a source of packed rows is one iov entry
    // (UCX packs an iov entry by entry), a read's reply one copy.
    if (write) {
      ucp_dt_iov_t& last = st->am.iov.back();
      if (st->am.iov.size() > 1 && static_cast<uint8_t*>(last.buffer) + last.length == local + lo) {
        last.length += len;
      } else {
        st->am.iov.push_back(ucp_dt_iov_t{local + lo, len});
      }
    } else if (!st->am.local_segs.empty() &&
               st->am.local_segs.back().local_offset + st->am.local_segs.back().length == lo) {
      st->am.local_segs.back().length += len;
    } else {
      st->am.local_segs.push_back(Segment{lo, 0, len});
    }
    return true;
  });
  st->bytes = total;
  if (st->am.runs.empty()) {  // nothing to move (all segments empty)
    if (st->notify) {
      SendNotify(st);
    } else {
      Finish(st, UCS_OK);
    }
    return;
  }
  st->am.rma.target_ep = ep->peer_tag_;
  st->am.rma.req_id = ReqId(st);
  st->am.rma.region_addr = rk->region().addr;
  st->am.rma.epoch = rk->region().epoch;
  st->am.rma.key = rk->key();
  st->am.rma.total = total;
  st->am.rma.num_segments = static_cast<uint32_t>(st->am.runs.size());
  st->am.rma.write = write ? 1 : 0;
  st->am.rma.notify = st->notify ? 1 : 0;
  st->am.rma.imm = st->imm;
  st->notify = false;  // the target queues the kNotify itself once the data has landed
  st->am.rma.table_bytes =
      static_cast<uint32_t>(common::EncodePackedTable(st->am.runs, &st->am.table));
  st->am.iov[0] = ucp_dt_iov_t{st->am.table.data(), st->am.table.size()};
  st->am.send_pending = true;
  st->am.reply_pending = true;
  ucp_request_param_t p = EagerAmParams(&UcxTransport::OnAmRmaSent, st);
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
  p.datatype = ucp_dt_make_iov();
  ucs_status_ptr_t req =
      ucp_am_send_nbx(ep->ep_.get(), kAmRmaRequest, &st->am.rma, sizeof(st->am.rma),
                      st->am.iov.data(), st->am.iov.size(), &p);
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
  st->am.send_pending = false;
  if (status != UCS_OK) {
    if (st->error == UCS_OK) st->error = status;
    st->am.reply_pending = false;  // the request never left: no reply will come
  }
  if (!st->am.reply_pending) t->AmFinish(st);
}

void UcxTransport::AmFinish(OpState* st) {
  Finish(st, st->error);
}

void UcxTransport::FailAmOps(UcxEndpoint* ep) {
  // The endpoint's own list of Ops in flight holds every one that waits for a reply (failure
  // path: the vector may allocate).
  std::vector<OpState*> ops;
  for (OpState* st = ep->ops_; st != nullptr; st = st->next) {
    if (st->am.reply_pending) ops.push_back(st);
  }
  for (OpState* st : ops) {
    st->am.reply_pending = false;
    if (st->error == UCS_OK) st->error = UCS_ERR_CANCELED;  // Finish reports ep->status_
    // A request still being sent completes (with an error) when UCX closes the ep.
    if (!st->am.send_pending) AmFinish(st);
  }
}

// ---- the reply pool ----

PendingReply* UcxTransport::TakeReply(uint64_t ep_id) {
  if (reply_free_.empty()) {
    reply_pool_.push_back(std::make_unique<PendingReply>());
    reply_free_.push_back(reply_pool_.back().get());
  }
  PendingReply* r = reply_free_.back();
  reply_free_.pop_back();
  r->t = this;
  r->ep_id = ep_id;
  r->header = RmaReplyHeader{};
  return r;
}

void UcxTransport::ReleaseReply(PendingReply* r) {
  if (r->region != nullptr) --r->region->replies_in_flight_;
  r->region = nullptr;
  r->data.clear();
  r->iov.clear();
  reply_free_.push_back(r);
}

void UcxTransport::QueueErrorReply(uint64_t ep_id, const RmaHeader& h, const Status& s) {
  PendingReply* r = TakeReply(ep_id);
  r->header.req_id = h.req_id;
  r->header.code = static_cast<uint32_t>(s.code());
  const std::string& m = s.message();
  r->data.assign(m.begin(), m.begin() + static_cast<ptrdiff_t>(std::min<size_t>(m.size(), 512)));
  replies_.push_back(r);
}

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
      t->QueueErrorReply(ep->id(), h,
                         ProtocolError("ucx: one-sided request from " + ep->peer_address_ +
                                       " came as rendezvous, expected eager"));
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
  ep->last_heard_ = common::CoarseNow();
  // Error texts are built on the failure path only: a served request allocates nothing.
  auto who = [&] { return "ucx: one-sided request from " + ep->peer_address_; };
  auto fail = [&](Status s) { t->QueueErrorReply(ep->id(), h, s); };
  const size_t table_bytes = h.table_bytes;
  if (h.num_segments == 0 || h.num_segments > options_.max_segments || table_bytes > length) {
    return fail(ProtocolError(who() + ": bad segment table (" + std::to_string(h.num_segments) +
                              " segments, " + std::to_string(table_bytes) + " of " +
                              std::to_string(length) + " bytes)"));
  }
  uint64_t total = 0;
  Status decoded = common::DecodePackedTable(std::span<const uint8_t>(bytes, table_bytes),
                                             h.num_segments, &serve_table_, &total);
  if (!decoded.ok()) return fail(decoded.Annotate(who()));
  if (total != h.total || (h.write && length - table_bytes != total) ||
      (!h.write && length != table_bytes)) {
    return fail(ProtocolError(who() + ": payload of " + std::to_string(length) +
                              " bytes does not match its segment table"));
  }
  auto rit = t->regions_.find(h.epoch);
  if (rit == t->regions_.end() || rit->second->descriptor().addr != h.region_addr) {
    return fail(Stale(who() + ": names no current registration (deregistered or forged key)"));
  }
  UcxMemoryRegion* mr = rit->second;
  if (h.key != mr->key()) {
    return fail(PermissionDenied(who() + ": wrong key for the registration it names"));
  }
  Status ok = common::CheckSegmentsInRegion(serve_table_, mr->size(), mr->access(),
                                            h.write ? kAccessRemoteWrite : kAccessRemoteRead);
  if (!ok.ok()) return fail(ok.Annotate(who()));
  PendingReply* r = TakeReply(ep->id());
  r->header.req_id = h.req_id;
  r->header.bytes = total;
  const uint8_t* src = bytes + table_bytes;
  for (const Segment& s : serve_table_) {
    if (h.write) {
      // Rows scattered over the region: whole aligned lines streamed (fenced below).
      common::ScatterRow(mr->data() + s.remote_offset, src, s.length);
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
  if (h.write) common::ScatterFence();  // landed before the reply or the kNotify says so
  if (h.write && h.notify) PushCompletion(0, OpType::kNotify, ep, total).imm = h.imm;
  t->replies_.push_back(r);
}

void UcxTransport::SendReplies() {
  reply_batch_.swap(replies_);  // replies_ is now the empty one, with its capacity
  for (PendingReply* raw : reply_batch_) {
    auto it = live_.find(raw->ep_id);
    if (it == live_.end() || it->second->state_ != UcxEndpoint::State::kReady) {
      ReleaseReply(raw);
      continue;
    }
    UcxEndpoint* ep = it->second;
    raw->header.target_ep = ep->peer_tag_;
    ucp_request_param_t p = EagerAmParams(&UcxTransport::OnReplySent, raw);
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
    // OnReplySent releases it, with any status (an error never aborts anything).
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
      ReleaseReply(raw);
      continue;
    }
    raw->sending = true;
    raw->prev = nullptr;
    raw->next = sending_;
    if (sending_ != nullptr) sending_->prev = raw;
    sending_ = raw;
  }
  reply_batch_.clear();
}

void UcxTransport::DrainRepliesFrom(UcxMemoryRegion* mr) {
  for (PendingReply* r : replies_) {
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
  for (PendingReply* r = sending_; r != nullptr; r = r->next) {
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
  for (PendingReply* r = sending_; r != nullptr; r = r->next) {
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
  UcxTransport* t = r->t;
  if (r->prev != nullptr) {
    r->prev->next = r->next;
  } else {
    t->sending_ = r->next;
  }
  if (r->next != nullptr) r->next->prev = r->prev;
  r->prev = r->next = nullptr;
  r->sending = false;
  t->ReleaseReply(r);
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
  OpState* st = t->AmOpFor(h.req_id, ep);
  if (st == nullptr) return UCS_OK;  // unknown, stale or forged
  ep->last_heard_ = common::CoarseNow();
  st->am.reply_pending = false;
  auto who = [&] { return "ucx: reply from " + ep->peer_address_; };
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    st->cma_error = ProtocolError(who() + " came as rendezvous, expected eager");
  } else if (h.code != 0) {
    const auto code = h.code <= static_cast<uint32_t>(Code::kInternal) ? static_cast<Code>(h.code)
                                                                       : Code::kProtocol;
    const auto* text = static_cast<const char*>(data);
    st->cma_error = Status(code, "target refused the " + std::string(OpTypeName(st->type)) + ": " +
                                     std::string(text, text + std::min<size_t>(length, 512)));
  } else if (h.bytes != st->bytes || (st->am.rma.write ? length != 0 : length != st->bytes)) {
    st->cma_error =
        ProtocolError(who() + ": " + std::to_string(length) +
                      " bytes do not match the request of " + std::to_string(st->bytes));
  } else if (!st->am.rma.write) {
    const auto* src = static_cast<const uint8_t*>(data);
    for (const Segment& s : st->am.local_segs) {
      std::memcpy(st->am.local_base + s.local_offset, src, s.length);
      src += s.length;
    }
  }
  if (!st->cma_error.ok() && st->error == UCS_OK) st->error = UCS_ERR_IO_ERROR;
  if (!st->am.send_pending) t->AmFinish(st);
  return UCS_OK;
}

}  // namespace ferry::ucx
