// FaultTransport: wraps any Transport and injects failures, so error paths of callers and of the
// conformance suite can be exercised on every backend (fault injection by wrapping, never by
// reaching into a backend's internals).
//
// What it can inject (all counters and the random stream are per wrapper, seeded):
//  - fail_after_ops: every op posted after the first N completes with `fail_code` without ever
//    reaching the inner transport (a connection that breaks after N operations);
//  - error_rate: each completion of the inner transport is replaced by an error with this
//    probability (the operation did run: a lost acknowledgement, as after a peer crash);
//  - delay: every completion is held back at least this long (slow peer / slow link);
//  - short_reads: kRead / kSparseRead / kRecv ops move only part of their bytes (the first half of
//    a contiguous op; the first half of a sparse op's segments) and complete with kIoError;
//  - sever_after_ops: when the N-th op is posted, every connection the wrapper made or accepted
//    is closed, as the kernel closes a killed process's (its peers see the connection end; its
//    own pending and later ops on them fail). A process that dies, without dying.
// Counters of what was injected are readable for reports.
//
// Progress: an empty Poll only drives the inner transport's progress (it takes no completions),
// and Wait blocks in the inner transport's Wait, at most until the first held completion is due,
// so Wake() and the inner progress keep working while completions are held back.
//
// Threading and lifetimes follow the Transport contract; the wrapper owns the inner transport.
// Endpoints, regions and keys are the inner transport's own objects.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>

#include "transport/transport.h"

namespace ferry {

struct FaultPlan {
  uint64_t fail_after_ops = UINT64_MAX;
  Code fail_code = Code::kPeerFailure;
  double error_rate = 0.0;
  Millis delay{0};
  bool short_reads = false;
  uint64_t sever_after_ops = UINT64_MAX;
  uint64_t seed = 1;
};

struct FaultCounters {
  uint64_t ops_posted = 0;
  uint64_t posts = 0;                  // Post calls (a batch of ops each)
  uint64_t largest_post = 0;           // the most ops one Post carried
  uint64_t ops_failed_injected = 0;    // by fail_after_ops
  uint64_t completions_corrupted = 0;  // by error_rate
  uint64_t short_reads = 0;
  uint64_t completions_delayed = 0;
  uint64_t connections_severed = 0;  // by sever_after_ops
  // When the first fault of any kind but delay was injected (epoch: none yet), so that a test
  // can bound how long its caller took to notice.
  std::chrono::steady_clock::time_point first_injection{};
};

class FaultTransport final : public Transport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, FaultPlan plan);
  ~FaultTransport() override;

  // Changes the plan for ops posted from now on.
  void SetPlan(const FaultPlan& plan);
  FaultCounters counters() const;
  // `fn` runs once with the final counters when this wrapper is destroyed: for a test whose
  // wrapper is owned, and destroyed, by the code under test (ps/ via
  // JobSpec::wrap_data_transport). Runs on the destroying thread.
  void OnDestroy(std::function<void(const FaultCounters&)> fn);
  Transport& inner() { return *inner_; }

  std::string_view name() const override { return inner_->name(); }
  const Capabilities& capabilities() const override { return inner_->capabilities(); }
  std::vector<DeviceInfo> devices() const override { return inner_->devices(); }
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
    return inner_->RegisterMemory(addr, length, access);
  }
  void Advertise(std::vector<RemoteRegion> regions) override {
    inner_->Advertise(std::move(regions));
  }
  Result<std::string> Listen(const std::string& address) override {
    return inner_->Listen(address);
  }
  Result<std::shared_ptr<Endpoint>> Accept(Millis timeout) override {
    return Track(inner_->Accept(timeout));
  }
  Result<std::shared_ptr<Endpoint>> Connect(const std::string& address, Millis timeout) override {
    return Track(inner_->Connect(address, timeout));
  }
  size_t Poll(std::span<Completion> out) override;
  Status Wait(Millis timeout) override;
  void Wake() override { inner_->Wake(); }

 protected:
  // Endpoints, regions and keys are the inner transport's own: its Post (which every forwarded
  // batch goes through) checks them.
  Status CheckOwnership(const Op&, size_t) const override { return Status::Ok(); }
  Status PostValidated(std::span<const Op> ops) override;

 private:
  struct Held {
    Completion completion;
    std::chrono::steady_clock::time_point release;
  };
  // Every op reaches the inner transport under a wrapper tag, so completions map back to the
  // caller's context without ambiguity.
  struct Pending {
    uint64_t user_context = 0;
    bool short_read = false;
    std::vector<Segment> segments;  // short sparse read: the first half of the caller's list
  };
  void HoldLocked(Completion c);
  void NoteInjectionLocked();
  // Remembers a connection for sever_after_ops.
  Result<std::shared_ptr<Endpoint>> Track(Result<std::shared_ptr<Endpoint>> ep);
  // Closes every remembered connection (sever_after_ops); called without mu_ held.
  void Sever();

  std::unique_ptr<Transport> inner_;
  mutable std::mutex mu_;
  FaultPlan plan_;
  FaultCounters counters_;
  std::mt19937_64 rng_;
  std::deque<Held> held_;  // completions waiting for their release time, in order
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> pending_;  // by wrapper tag
  uint64_t next_tag_ = 1;
  std::function<void(const FaultCounters&)> on_destroy_;
  std::vector<std::weak_ptr<Endpoint>> endpoints_;  // made or accepted, for sever_after_ops
};

}  // namespace ferry
