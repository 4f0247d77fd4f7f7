// A Transport double that only registers memory: it records every registration and checks that
// a region is never registered while an older registration of the same table is still alive
// (the ArrayHashMap must deregister before it remaps).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace ferry::ps::testing {

class FakeTransport final : public Transport {
 public:
  struct Registration {
    uint64_t addr;
    uint64_t length;
  };

  std::string_view name() const override { return "fake"; }
  const Capabilities& capabilities() const override { return caps_; }
  std::vector<DeviceInfo> devices() const override { return {}; }
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
    if (fail_next_) {
      fail_next_ = false;
      return ResourceExhausted("fake registration failure");
    }
    if (live_ != 0) overlapping_registrations_++;
    ++live_;
    history_.push_back({reinterpret_cast<uint64_t>(addr), length});
    return std::unique_ptr<MemoryRegion>(
        new Region(this, static_cast<uint8_t*>(addr), length, access, history_.size()));
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

  int live() const { return live_; }
  int overlapping_registrations() const { return overlapping_registrations_; }
  const std::vector<Registration>& history() const { return history_; }
  void FailNextRegistration() { fail_next_ = true; }

 private:
  class Region final : public MemoryRegion {
   public:
    Region(FakeTransport* t, uint8_t* data, size_t size, uint32_t access, size_t serial)
        : MemoryRegion(data, size, access), t_(t) {
      descriptor_.addr = reinterpret_cast<uint64_t>(data);
      descriptor_.length = size;
      descriptor_.access = access;
      descriptor_.rkey = {static_cast<uint8_t>(serial)};
    }
    ~Region() override { --t_->live_; }

   private:
    FakeTransport* t_;
  };

  Capabilities caps_;
  int live_ = 0;
  int overlapping_registrations_ = 0;
  bool fail_next_ = false;
  std::vector<Registration> history_;
};

}  // namespace ferry::ps::testing
