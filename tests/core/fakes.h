// Stand-ins for a backend's region, imported key and endpoint, for tests of the backend-neutral
// checks (ValidateOp and friends): nothing is registered, nothing moves.
#pragma once

#include <cstdint>
#include <memory>

#include "transport/transport.h"

namespace ferry::testing_fakes {

class FakeRegion : public MemoryRegion {
 public:
  FakeRegion(size_t size, uint32_t access) : MemoryRegion(nullptr, size, access) {}
};

class FakeKey : public RemoteKey {
 public:
  FakeKey(uint64_t length, uint32_t access)
      : RemoteKey(RemoteRegion{0x10000, length, access, 1, {1, 2, 3}}) {}
};

class FakeEndpoint : public Endpoint {
 public:
  Status status() const override { return Status::Ok(); }
  Result<std::unique_ptr<RemoteKey>> Import(const RemoteRegion&) override {
    return Unsupported("fake");
  }
  void Close() override {}
};

}  // namespace ferry::testing_fakes
