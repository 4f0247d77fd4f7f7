#include "transport/fault/fault.h"

#include <algorithm>

#include "transport/backend.h"

namespace ferry {

using Clock = std::chrono::steady_clock;

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(plan), rng_(plan.seed) {}

FaultTransport::~FaultTransport() {
  if (on_destroy_) on_destroy_(counters());
}

void FaultTransport::OnDestroy(std::function<void(const FaultCounters&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  on_destroy_ = std::move(fn);
}

void FaultTransport::SetPlan(const FaultPlan& plan) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = plan;
  counters_.ops_posted = 0;
  rng_.seed(plan.seed);
}

FaultCounters FaultTransport::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void FaultTransport::HoldLocked(Completion c) {
  if (plan_.delay.count() > 0) ++counters_.completions_delayed;
  held_.push_back({std::move(c), Clock::now() + plan_.delay});
}

void FaultTransport::NoteInjectionLocked() {
  if (counters_.first_injection == Clock::time_point()) counters_.first_injection = Clock::now();
}

Result<std::shared_ptr<Endpoint>> FaultTransport::Track(Result<std::shared_ptr<Endpoint>> ep) {
  if (ep.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    endpoints_.push_back(*ep);
  }
  return ep;
}

void FaultTransport::Sever() {
  std::vector<std::shared_ptr<Endpoint>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : endpoints_) {
      if (auto ep = w.lock()) live.push_back(std::move(ep));
    }
    counters_.connections_severed += live.size();
    NoteInjectionLocked();
  }
  for (auto& ep : live) ep->Close();  // non-blocking; pending ops complete as cancelled
}

// Transport::Post has validated the caller's ops as they are, so a malformed batch fails
// exactly as it would without the wrapper (nothing posted).
Status FaultTransport::PostValidated(std::span<const Op> ops) {
  bool sever = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sever = counters_.ops_posted < plan_.sever_after_ops &&
            counters_.ops_posted + ops.size() >= plan_.sever_after_ops;
  }
  if (sever) Sever();  // the N-th op finds its connections already closed, as every later one
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.posts;
  counters_.largest_post = std::max<uint64_t>(counters_.largest_post, ops.size());
  std::vector<Op> forward;
  forward.reserve(ops.size());
  std::vector<uint64_t> tags;
  for (const Op& op : ops) {
    ++counters_.ops_posted;
    if (counters_.ops_posted > plan_.fail_after_ops) {
      ++counters_.ops_failed_injected;
      NoteInjectionLocked();
      Completion c;
      c.context = op.context;
      c.type = op.type;
      c.code = plan_.fail_code;
      c.ep = op.ep;
      c.error = "injected failure after " + std::to_string(plan_.fail_after_ops) + " operations";
      HoldLocked(std::move(c));
      continue;
    }
    auto pending = std::make_unique<Pending>();
    pending->user_context = op.context;
    Op fwd = op;
    fwd.context = next_tag_++;
    const bool readish =
        op.type == OpType::kRead || op.type == OpType::kRecv || op.type == OpType::kSparseRead;
    if (plan_.short_reads && readish) {
      pending->short_read = true;
      if (op.type == OpType::kSparseRead) {
        size_t half = std::max<size_t>(1, op.num_segments / 2);
        pending->segments.assign(op.segments, op.segments + half);
        if (half == op.num_segments) pending->segments.back().length /= 2;
        fwd.segments = pending->segments.data();
        fwd.num_segments = pending->segments.size();
      } else if (op.type == OpType::kRead) {
        fwd.length = op.length / 2;
      }
      // kRecv: the message is received whole; the completion is then reported short.
    }
    tags.push_back(fwd.context);
    pending_.emplace(fwd.context, std::move(pending));
    forward.push_back(fwd);
  }
  if (forward.empty()) return Status::Ok();
  Status s = inner_->Post(forward);
  if (!s.ok()) {
    for (uint64_t t : tags) pending_.erase(t);
  }
  return s;
}

size_t FaultTransport::Poll(std::span<Completion> out) {
  // An empty Poll only drives progress, as the contract lets a second thread do to keep
  // connections alive (ps/node.cc's idle hook does). Taking the inner completions here would
  // park them in held_ while the owner sleeps in the inner Wait(), which they no longer wake.
  if (out.empty()) return inner_->Poll(out);
  std::vector<Completion> got(std::max<size_t>(out.size(), 16));
  size_t n = inner_->Poll(got);
  std::lock_guard<std::mutex> lock(mu_);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    Completion c = std::move(got[i]);
    if (c.type != OpType::kNotify) {
      auto it = pending_.find(c.context);
      if (it != pending_.end()) {
        const Pending& p = *it->second;
        c.context = p.user_context;
        if (p.short_read && c.ok()) {
          ++counters_.short_reads;
          NoteInjectionLocked();
          c.code = Code::kIoError;
          c.error = "injected short read: " + std::to_string(c.bytes) + " bytes moved";
          c.bytes /= 2;
        }
        pending_.erase(it);
      }
    }
    if (c.ok() && plan_.error_rate > 0 && coin(rng_) < plan_.error_rate) {
      ++counters_.completions_corrupted;
      NoteInjectionLocked();
      c.code = Code::kIoError;
      c.error = "injected error completion";
    }
    HoldLocked(std::move(c));
  }
  size_t k = 0;
  const auto now = Clock::now();
  while (k < out.size() && !held_.empty() && held_.front().release <= now) {
    out[k++] = std::move(held_.front().completion);
    held_.pop_front();
  }
  return k;
}

Status FaultTransport::Wait(Millis timeout) {
  Millis budget = timeout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!held_.empty()) {
      const auto left = held_.front().release - Clock::now();
      if (left <= Clock::duration::zero()) return Status::Ok();
      budget = std::min(timeout, std::chrono::ceil<Millis>(left));
    }
  }
  // Waiting in the inner transport rather than sleeping keeps driving its progress (a peer
  // waiting on us, or a passive target's accesses, must not stall for a whole delay) and lets
  // Wake() cut the wait short, as the contract promises.
  return inner_->Wait(budget);
}

}  // namespace ferry
