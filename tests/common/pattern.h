// Seeded byte patterns for checking transfers byte for byte.
//
// The pattern is a pure function of (seed, absolute position): byte `pos` of stream `seed` is
// byte pos % 8 of SplitMix64(seed, pos / 8). Any sub-range can therefore be generated or checked
// on its own, e.g. FillPattern(buf + 100, 50, seed, 100) writes bytes 100..149 of the stream.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ferry::testing {

void FillPattern(void* dst, size_t len, uint64_t seed, uint64_t pos = 0);

// Success when [src, src+len) equals bytes [pos, pos+len) of stream `seed`; otherwise names the
// first differing offset, how many bytes differ, and what was expected there.
::testing::AssertionResult CheckPattern(const void* src, size_t len, uint64_t seed,
                                        uint64_t pos = 0);

// Success when the two ranges are equal; otherwise names the first differing offset and the
// number of differing bytes. `what` prefixes the message.
::testing::AssertionResult SameBytes(const char* what, const void* got, const void* want,
                                     size_t len);

// A page-aligned heap buffer (freed on destruction), zero-initialised.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t size);
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

}  // namespace ferry::testing
