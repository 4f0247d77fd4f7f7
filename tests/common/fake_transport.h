// The one Transport double of the test suites: it only registers memory, for testing what sits
// above the transport (the registered pool, the ArrayHashMap's registrations) without a network
// backend. It counts registrations and live regions, notices a registration made while
// another is still alive (the ArrayHashMap must deregister before it remaps), and injects
// registration failures on demand. Everything else answers kUnsupported.
//
// Thread-safety: registration is thread-safe (the pool registers from several threads); the
// failure switches are set before the threads start.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace ferry::testing {

class FakeTransport final : public Transport {
 public:
  std::string_view name() const override { return "fake"; }
  const Capabilities& capabilities() const override { return caps_; }
  std::vector<DeviceInfo> devices() const override { return {}; }
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
    if (fail_next_) {
      fail_next_ = false;
      return ResourceExhausted("fake: registration refused (injected)");
    }
    if (fail_registrations_after >= 0 && registrations >= fail_registrations_after) {
      return ResourceExhausted("fake: registration refused (memlock limit)");
    }
    const int serial = ++registrations;
    if (live_regions != 0) ++overlapping_;
    return std::unique_ptr<MemoryRegion>(
        new Region(this, static_cast<uint8_t*>(addr), length, access, serial));
  }
  void Advertise(std::vector<RemoteRegion>) override {}
  Result<std::string> Listen(const std::string&) override { return Unsupported("fake"); }
  Result<std::shared_ptr<Endpoint>> Accept(Millis) override { return Unsupported("fake"); }
  Result<std::shared_ptr<Endpoint>> Connect(const std::string&, Millis) override {
    return Unsupported("fake");
  }
  size_t Poll(std::span<Completion>) override { return 0; }
  Status Wait(Millis) override { return Unsupported("fake"); }
  void Wake() override {}

  // Live regions now, and registrations made while an older one was still alive.
  int live() const { return live_regions; }
  int overlapping_registrations() const { return overlapping_; }
  void FailNextRegistration() { fail_next_ = true; }

  std::atomic<int> registrations{0};
  std::atomic<int> live_regions{0};
  int fail_registrations_after = -1;  // -1: never

 protected:
  // No endpoints, hence no op can belong here: the capabilities (none) refuse every op first.
  Status CheckOwnership(const Op&, size_t) const override { return Status::Ok(); }
  Status PostValidated(std::span<const Op>) override { return Unsupported("fake"); }

 private:
  class Region final : public MemoryRegion {
   public:
    Region(FakeTransport* t, uint8_t* data, size_t size, uint32_t access, int serial)
        : MemoryRegion(data, size, access), t_(t) {
      descriptor_.addr = reinterpret_cast<uint64_t>(data);
      descriptor_.length = size;
      descriptor_.access = access;
      descriptor_.rkey = {static_cast<uint8_t>(serial)};
      ++t_->live_regions;
    }
    ~Region() override { --t_->live_regions; }

   private:
    FakeTransport* t_;
  };

  Capabilities caps_;
  std::atomic<int> overlapping_{0};
  bool fail_next_ = false;
};

}  // namespace ferry::testing
