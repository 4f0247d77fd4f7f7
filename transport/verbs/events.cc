// Progress, failure handling, async events, heartbeats and waiting.
#include "transport/verbs/events.h"

#include <algorithm>
#include <cerrno>

#include "transport/common/coarse_clock.h"
#include "transport/verbs/errors.h"
#include "transport/verbs/verbs_transport.h"

namespace ferry::verbs {

AsyncHub& AsyncHub::Get() {
  static AsyncHub* hub = new AsyncHub();  // never destroyed: transports may outlive statics
  return *hub;
}

std::shared_ptr<AsyncInbox> AsyncHub::Subscribe(ibv_context* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& subs = subscribers_[ctx];
  if (subs.empty()) (void)SetNonBlocking(ctx->async_fd);
  subs.push_back(std::make_shared<AsyncInbox>());
  return subs.back();
}

void AsyncHub::Unsubscribe(ibv_context* ctx, const std::shared_ptr<AsyncInbox>& inbox) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& subs = subscribers_[ctx];
  subs.erase(std::remove(subs.begin(), subs.end(), inbox), subs.end());
}

void AsyncHub::Drain(ibv_context* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ibv_async_event ev{};
  while (ibv_get_async_event(ctx, &ev) == 0) {
    AsyncNote note{ev.event_type};
    switch (ev.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
      case IBV_EVENT_PATH_MIG:
        note.qpn = ev.element.qp->qp_num;
        break;
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_GID_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
        note.port = static_cast<uint8_t>(ev.element.port_num);
        break;
      default:
        break;
    }
    ibv_ack_async_event(&ev);
    for (auto& inbox : subscribers_[ctx]) {
      std::lock_guard<std::mutex> il(inbox->mu);
      inbox->notes.push_back(note);
    }
  }
}

void VerbsTransport::ProcessAsyncEventsLocked() {
  AsyncHub::Get().Drain(ctx_);
  std::vector<AsyncNote> notes;
  {
    std::lock_guard<std::mutex> il(inbox_->mu);
    notes.swap(inbox_->notes);
  }
  const std::string where = port_.device + ":" + std::to_string(port_.port);
  for (const AsyncNote& n : notes) {
    const std::string name = ibv_event_type_str(n.type);
    switch (n.type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
        if (VerbsEndpoint* ep = EndpointByQpnLocked(n.qpn)) {
          FailEndpointLocked(ep, PeerFailure("async event '" + name + "' on " + QpName(n.qpn) +
                                             " (" + where + "): the QP is in the error state"));
        }
        break;
      case IBV_EVENT_PORT_ERR:
        if (n.port == port_.port) {
          for (auto& [id, ep] : endpoints_) {
            FailEndpointLocked(ep.get(),
                               PeerFailure("port " + where + " went down (" + name + ")"));
          }
        }
        break;
      case IBV_EVENT_DEVICE_FATAL:
      case IBV_EVENT_CQ_ERR:
      case IBV_EVENT_SRQ_ERR:
        FailAllLocked(IoError("async event '" + name + "' on " + where, EIO));
        break;
      default:
        break;
    }
  }
}

void VerbsTransport::FailEndpointLocked(VerbsEndpoint* ep, Status why, bool linger) {
  if (ep->state_ == VerbsEndpoint::State::kFailed || ep->state_ == VerbsEndpoint::State::kClosed) {
    return;
  }
  ep->state_ = VerbsEndpoint::State::kFailed;
  ep->status_ = why;
  // User work fails now, with the endpoint's reason.
  for (auto& owned : records_) {
    OpRecord& rec = *owned;
    if (!rec.in_use || rec.ep != ep || (linger && rec.kind == OpRecord::Kind::kControl)) continue;
    if (rec.kind == OpRecord::Kind::kUser) {
      FailOpLocked(rec.context, rec.type, rec.completion_ep, why);
    }
    FreeRecordLocked(&rec);
  }
  auto fail_recv = [&](const PendingRecv& r) { FailOpLocked(r.context, OpType::kRecv, ep, why); };
  while (!ep->recvs_.empty()) fail_recv(ep->recvs_.pop());
  if (ep->assembling_) fail_recv(*ep->assembling_);
  ep->assembling_.reset();
  while (!ep->unexpected_.empty()) RepostLocked(ep->unexpected_.pop().buffer);
  if (linger) {
    // Keep the QP up briefly so the Reject frame reaches the peer (see HeartbeatLocked()).
    ep->lingering_ = true;
    ep->linger_until_ = common::CoarseNow() + std::chrono::seconds(1);
    return;
  }
  TearDownLocked(ep);
}

void VerbsTransport::TearDownLocked(VerbsEndpoint* ep) {
  ep->lingering_ = false;
  for (auto& owned : records_) {
    if (owned->in_use && owned->ep == ep) FreeRecordLocked(owned.get());
  }
  ep->backlog_.clear();
  ep->posted_.Clear();
  ep->sq_used_ = 0;
  ep->inflight_bytes_ = 0;
  if (ep->qp_) {
    // Stop the HCA from touching memory on this QP's behalf; late flush completions are ignored
    // (their records are gone).
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(ep->qp_.get(), &attr, IBV_QP_STATE);
  }
  if (ep->cm_id_) (void)rdma_disconnect(ep->cm_id_.get());
  ep->control_fd_.reset();  // the peer's control socket sees EOF
}

void VerbsTransport::CloseEndpointLocked(VerbsEndpoint* ep) {
  if (ep->state_ == VerbsEndpoint::State::kClosed) return;
  if (ep->state_ == VerbsEndpoint::State::kFailed) {
    if (ep->lingering_) TearDownLocked(ep);
  } else {
    FailEndpointLocked(ep, Cancelled("endpoint " + std::to_string(ep->id()) + " to " +
                                     ep->peer_address() + " was closed locally"));
  }
  ep->state_ = VerbsEndpoint::State::kClosed;
}

void VerbsTransport::FailAllLocked(const Status& why) {
  if (fatal_.ok()) fatal_ = why;
  for (auto& [id, ep] : endpoints_) FailEndpointLocked(ep.get(), why);
}

void VerbsTransport::ReapLocked() {
  for (auto it = endpoints_.begin(); it != endpoints_.end();) {
    VerbsEndpoint* ep = it->second.get();
    const bool dead =
        ep->state_ == VerbsEndpoint::State::kFailed || ep->state_ == VerbsEndpoint::State::kClosed;
    if (dead && !ep->lingering_ && it->second.use_count() == 1) {
      if (ep->qp_) by_qpn_.erase(ep->qpn());
      ep->ReleaseResources();
      it = endpoints_.erase(it);
    } else {
      ++it;
    }
  }
}

void VerbsTransport::HeartbeatLocked() {
  const auto now = common::CoarseNow();
  const auto timeout = options_.peer_timeout;
  for (auto& [id, sp] : endpoints_) {
    VerbsEndpoint* ep = sp.get();
    if (ep->lingering_ && (ep->sq_used_ == 0 || now > ep->linger_until_)) TearDownLocked(ep);
    if (ep->state_ != VerbsEndpoint::State::kReady) continue;
    // Backstop to the QP's own ack timeout and retries: work outstanding, nothing acknowledged
    // for peer_timeout. (Also fires when the peer stops posting receives for that long: RNR
    // retries are unlimited, so this deadline is what bounds them.)
    // Large transfers get extra time: one millisecond per kilobyte in flight (1 MB/s, slower
    // than any real or emulated link).
    const auto allowance = timeout + Millis(ep->inflight_bytes_ / 1000);
    if (ep->sq_used_ > 0 && now - ep->last_ack_ > allowance) {
      FailEndpointLocked(
          ep, PeerFailure("peer " + ep->peer_address() +
                          " acknowledged nothing "
                          "within peer_timeout (" +
                          std::to_string(timeout.count()) + " ms) on " + QpName(ep->qpn()) +
                          ": it is gone, unreachable, or posts no receives"));
      continue;
    }
    if (ep->hb_outstanding_) {
      if (now - ep->hb_posted_ > timeout) {
        FailEndpointLocked(ep, PeerFailure("peer " + ep->peer_address() +
                                           " did not acknowledge a heartbeat within " +
                                           std::to_string(timeout.count()) + " ms"));
      }
      continue;
    }
    if (!ep->backlog_.empty() || ep->sq_used_ != 0 || now - ep->last_heard_ < timeout / 3) {
      continue;
    }
    // Idle: an 8-byte RDMA WRITE to the peer's heartbeat word. A dead peer makes it fail with
    // RETRY_EXC_ERR (QP timeout x retry_cnt); the deadline above is the backstop.
    OpRecord* rec = NewRecordLocked(OpRecord::Kind::kHeartbeat, ep);
    if (rec == nullptr) continue;  // the pool is full of work: that is liveness enough
    PlanContiguous(reinterpret_cast<uintptr_t>(hb_word_.get()), sizeof(uint64_t), hb_mr_->lkey,
                   ep->peer_.heartbeat_addr, ep->peer_.heartbeat_rkey, IBV_WR_RDMA_WRITE,
                   port_.max_msg_sz, &rec->plan);
    ep->backlog_.push(rec->id);
    ep->hb_outstanding_ = true;
    ep->hb_posted_ = now;
    ep->last_heard_ = now;
    PumpLocked(ep);
  }
}

void VerbsTransport::ProgressLocked(EventCheck events) {
  PollCqLocked();
  // The coarse clock gates the event drains and the housekeeping (a vDSO read without a TSC read:
  // a steady_clock read on every turn of a busy Poll() was 2.8 % of a ping-pong's samples in the
  // soft-RoCE VM, docs/perf/transport-analysis.md); both are millisecond-scale gates.
  const auto now = common::CoarseNow();
  // rdma_get_cm_event and ibv_get_async_event are one failed write()/read() syscall each when
  // nothing is pending, which is almost always. On the Poll() path they were two of the three
  // syscalls of every turn (ibv_post_send is the third on rxe) and, with the contention they
  // caused, the largest cost of a verbs ping-pong in the soft-RoCE VM (perf + strace -c,
  // docs/perf/transport-analysis.md). Connection and async events are not latency-critical: a
  // busy-polling caller sees them at most kEventInterval late; callers that slept on the fds
  // (Wait, Accept, Connect, the progress thread) always check.
  if (events == EventCheck::kAlways || now >= next_events_) {
    next_events_ = now + kEventInterval;
    if (config_.mode == ConnectMode::kCm) ProcessCmEventsLocked();
    ProcessAsyncEventsLocked();
  }
  if (now >= next_housekeeping_) {
    next_housekeeping_ = now + Millis(10);
    if (config_.mode == ConnectMode::kOob) {
      CheckControlSocketsLocked();
      DriveOobSessionsLocked();
    }
    HeartbeatLocked();
  }
  FlushRepostsLocked();
  ReapLocked();
}

std::vector<pollfd> VerbsTransport::WaitFdsLocked() {
  std::vector<pollfd> fds;
  if (ibv_req_notify_cq(cq_.get(), 0) == 0) cq_armed_ = true;
  fds.push_back(pollfd{channel_->fd, POLLIN, 0});
  fds.push_back(pollfd{ctx_->async_fd, POLLIN, 0});
  if (cm_channel_) fds.push_back(pollfd{cm_channel_->fd, POLLIN, 0});
  for (auto& [id, ep] : endpoints_) {
    if (ep->control_fd_) fds.push_back(pollfd{ep->control_fd_.get(), POLLIN, 0});
  }
  for (auto& s : oob_sessions_) {
    fds.push_back(
        pollfd{s->fd.get(), static_cast<short>(POLLIN | (s->out.empty() ? 0 : POLLOUT)), 0});
  }
  if (listen_fd_) fds.push_back(pollfd{listen_fd_.get(), POLLIN, 0});
  if (wake_fd_) fds.push_back(pollfd{wake_fd_.get(), POLLIN, 0});
  return fds;
}

void VerbsTransport::SleepOnFds(std::vector<pollfd> fds, Millis slice) {
  (void)::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(slice.count(), 0)));
}

void VerbsTransport::ProgressThreadMain() {
  while (!stop_) {
    std::vector<pollfd> fds;
    {
      std::lock_guard<common::MaybeMutex> lock(mu_);
      ProgressLocked();
      fds = WaitFdsLocked();
      PollCqLocked();  // closes the race between the last poll and arming
    }
    SleepOnFds(std::move(fds), Millis(10));
  }
}

size_t VerbsTransport::Poll(std::span<Completion> out) {
  // kMulti: a thread that finds the lock taken leaves progress to its holder (non-blocking),
  // unless the holder is the progress thread: what it reaped is queued for the caller, who then
  // waits for the lock (a Wait() that returned for a queued completion is followed by a Poll
  // that returns it).
  std::unique_lock<common::MaybeMutex> lock(mu_, std::defer_lock);
  if (options_.progress_thread) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return 0;
  }
  if (ready_.empty() || out.empty()) ProgressLocked(EventCheck::kWhenDue);
  size_t n = 0;
  while (n < out.size() && !ready_.empty()) out[n++] = ready_.pop();
  return n;
}

Status VerbsTransport::Wait(Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (wake_requested_.exchange(false, std::memory_order_acq_rel)) {
      uint64_t value;
      ssize_t ignored = read(wake_fd_.get(), &value, sizeof(value));  // re-arm the eventfd
      (void)ignored;
      return Status::Ok();
    }
    std::vector<pollfd> fds;
    {
      std::lock_guard<common::MaybeMutex> lock(mu_);
      ProgressLocked();
      if (!ready_.empty()) return Status::Ok();
      fds = WaitFdsLocked();
      PollCqLocked();
      if (!ready_.empty()) return Status::Ok();
    }
    const auto now = Clock::now();
    if (now >= deadline) return Status::Ok();
    auto left = std::chrono::duration_cast<Millis>(deadline - now) + Millis(1);
    SleepOnFds(std::move(fds), std::min<Millis>(left, Millis(20)));
  }
}

void VerbsTransport::Wake() {
  wake_requested_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));
  (void)ignored;
}

}  // namespace ferry::verbs
