// A Transport that only registers memory, for testing services above the transport (the pool)
// without a network backend. Registration failures can be injected.
#pragma once

#include <atomic>
#include <memory>

#include "transport/transport.h"

namespace ferry::testing {

class FakeRegion : public MemoryRegion {
 public:
  FakeRegion(uint8_t* data, size_t size, uint32_t access, std::atomic<int>* live)
      : MemoryRegion(data, size, access), live_(live) {
    descriptor_.addr = reinterpret_cast<uint64_t>(data);
    descriptor_.length = size;
    descriptor_.access = access;
    ++*live_;
  }
  ~FakeRegion() override { --*live_; }

 private:
  std::atomic<int>* live_;
};

class FakeTransport : public Transport {
 public:
  std::string_view name() const override { return "fake"; }
  const Capabilities& capabilities() const override { return caps_; }
  std::vector<DeviceInfo> devices() const override { return {}; }
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
    if (fail_registrations_after >= 0 && registrations >= fail_registrations_after) {
      return ResourceExhausted("fake: registration refused (memlock limit)");
    }
    ++registrations;
    return std::unique_ptr<MemoryRegion>(
        new FakeRegion(static_cast<uint8_t*>(addr), length, access, &live_regions));
  }
  void Advertise(std::vector<RemoteRegion>) override {}
  Result<std::string> Listen(const std::string&) override { return Unsupported("fake"); }
  Result<std::shared_ptr<Endpoint>> Accept(Millis) override { return Unsupported("fake"); }
  Result<std::shared_ptr<Endpoint>> Connect(const std::string&, Millis) override {
    return Unsupported("fake");
  }
  Status Post(std::span<const Op>) override { return Unsupported("fake"); }
  size_t Poll(std::span<Completion>) override { return 0; }
  Status Wait(Millis) override { return Unsupported("fake"); }
  void Wake() override {}

  std::atomic<int> registrations{0};
  std::atomic<int> live_regions{0};
  int fail_registrations_after = -1;  // -1: never

 private:
  Capabilities caps_;
};

}  // namespace ferry::testing
