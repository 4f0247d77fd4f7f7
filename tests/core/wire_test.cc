// EncodeRemoteRegion / DecodeRemoteRegion: round trips and hostile input. A decoder fed bytes from
// the network must either return the exact region that was encoded or a kProtocol error; it must
// never crash or read out of bounds (run this under the asan build to prove the latter).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/common/print.h"
#include "transport/handshake.h"
#include "transport/schema/wire_generated.h"
#include "transport/transport.h"

namespace ferry {
namespace {

RemoteRegion RandomRegion(std::mt19937_64& rng, size_t rkey_len) {
  RemoteRegion r;
  r.addr = rng();
  r.length = rng();
  r.access = static_cast<uint32_t>(rng());
  r.epoch = rng();
  r.rkey.resize(rkey_len);
  for (auto& b : r.rkey) b = static_cast<uint8_t>(rng());
  return r;
}

TEST(RemoteRegionWireTest, RoundTripsDefaultAndExtremeValues) {
  RemoteRegion empty;
  auto decoded = DecodeRemoteRegion(EncodeRemoteRegion(empty));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, empty);

  RemoteRegion max;
  max.addr = std::numeric_limits<uint64_t>::max();
  max.length = std::numeric_limits<uint64_t>::max();
  max.access = std::numeric_limits<uint32_t>::max();
  max.epoch = std::numeric_limits<uint64_t>::max();
  max.rkey.assign(300, 0xff);
  decoded = DecodeRemoteRegion(EncodeRemoteRegion(max));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, max);
}

TEST(RemoteRegionWireTest, RoundTripsRandomRegions) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000; ++i) {
    RemoteRegion r = RandomRegion(rng, rng() % 200);
    auto decoded = DecodeRemoteRegion(EncodeRemoteRegion(r));
    ASSERT_TRUE(decoded.ok()) << "iteration " << i << ": " << decoded.status().ToString();
    ASSERT_EQ(*decoded, r) << "iteration " << i;
  }
}

TEST(RemoteRegionWireTest, RejectsEmptyAndTinyInput) {
  std::vector<uint8_t> none;
  auto r = DecodeRemoteRegion(none);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kProtocol);
  for (size_t n = 1; n < 8; ++n) {
    std::vector<uint8_t> zeros(n, 0);
    auto z = DecodeRemoteRegion(zeros);
    ASSERT_FALSE(z.ok()) << n;
    EXPECT_EQ(z.status().code(), Code::kProtocol);
  }
}

// Every strict prefix either fails with kProtocol or (when the cut removed only trailing
// alignment padding) decodes to exactly the original: never to different values.
TEST(RemoteRegionWireTest, TruncatedInputNeverDecodesToOtherValues) {
  std::mt19937_64 rng(2);
  for (size_t rkey_len : {0, 1, 5, 16, 37, 200}) {
    RemoteRegion r = RandomRegion(rng, rkey_len);
    std::vector<uint8_t> bytes = EncodeRemoteRegion(r);
    size_t failures = 0;
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      auto d = DecodeRemoteRegion(cut);
      if (d.ok()) {
        EXPECT_EQ(*d, r) << "prefix of " << n << " of " << bytes.size() << " bytes";
        // Only alignment padding (at most 7 bytes) may be dropped without notice.
        EXPECT_GE(n + 8, bytes.size()) << "prefix of " << n << " bytes decoded";
      } else {
        EXPECT_EQ(d.status().code(), Code::kProtocol);
        ++failures;
      }
    }
    EXPECT_GT(failures, bytes.size() / 2) << "rkey of " << rkey_len;
  }
}

// Flip every bit of an encoding: decoding must not crash and must fail only with kProtocol.
TEST(RemoteRegionWireTest, BitFlipsFailCleanly) {
  std::mt19937_64 rng(3);
  RemoteRegion r = RandomRegion(rng, 24);
  const std::vector<uint8_t> bytes = EncodeRemoteRegion(r);
  size_t rejected = 0;
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    std::vector<uint8_t> flipped = bytes;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto d = DecodeRemoteRegion(flipped);
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), Code::kProtocol) << "bit " << bit;
      ++rejected;
    }
  }
  // Offsets and lengths are in the buffer: a fair share of flips must be caught by the verifier.
  EXPECT_GT(rejected, 0u);
}

TEST(RemoteRegionWireTest, RandomBytesFailCleanly) {
  std::mt19937_64 rng(4);
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> junk(rng() % 300);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    auto d = DecodeRemoteRegion(junk);
    if (d.ok()) {
      ++accepted;
    } else {
      ASSERT_EQ(d.status().code(), Code::kProtocol) << d.status().ToString();
    }
  }
  EXPECT_LT(accepted, 100u) << "the verifier accepts too much random input";
}

// A vector header claiming more bytes than the buffer holds must not be followed.
TEST(RemoteRegionWireTest, LyingVectorLengthIsRejected) {
  RemoteRegion r;
  r.rkey.assign(32, 0xab);
  std::vector<uint8_t> bytes = EncodeRemoteRegion(r);
  // Find the rkey length prefix (32, little-endian) followed by the 0xab bytes.
  size_t pos = bytes.size();
  for (size_t i = 0; i + 4 + 32 <= bytes.size(); ++i) {
    if (bytes[i] == 32 && bytes[i + 1] == 0 && bytes[i + 2] == 0 && bytes[i + 3] == 0 &&
        bytes[i + 4] == 0xab) {
      pos = i;
      break;
    }
  }
  ASSERT_LT(pos, bytes.size()) << "rkey vector not found in the encoding";
  for (uint32_t lie : {33u, 1000u, 0x7fffffffu, 0xffffffffu}) {
    std::vector<uint8_t> bad = bytes;
    for (int k = 0; k < 4; ++k) bad[pos + k] = static_cast<uint8_t>(lie >> (8 * k));
    auto d = DecodeRemoteRegion(bad);
    ASSERT_FALSE(d.ok()) << "length " << lie;
    EXPECT_EQ(d.status().code(), Code::kProtocol);
  }
}

TEST(RemoteRegionWireTest, OversizeInputIsRejected) {
  RemoteRegion r;
  r.rkey.assign(kMaxHandshakeFrame + 16, 0x5a);
  std::vector<uint8_t> bytes = EncodeRemoteRegion(r);
  ASSERT_GT(bytes.size(), kMaxHandshakeFrame);
  auto d = DecodeRemoteRegion(bytes);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kProtocol);

  // Just under the limit still decodes.
  r.rkey.assign(kMaxHandshakeFrame - 256, 0x5a);
  bytes = EncodeRemoteRegion(r);
  ASSERT_LE(bytes.size(), kMaxHandshakeFrame);
  d = DecodeRemoteRegion(bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, r);

  // Valid region bytes followed by a megabyte of trailing junk.
  std::vector<uint8_t> padded = EncodeRemoteRegion(RemoteRegion{});
  padded.resize(kMaxHandshakeFrame + 1, 0);
  d = DecodeRemoteRegion(padded);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kProtocol);
}

TEST(RemoteRegionWireTest, OtherFrameTypesAreNotRegions) {
  flatbuffers::FlatBufferBuilder b;
  auto rej = wire::CreateReject(b, b.CreateString("no"));
  b.Finish(wire::CreateFrame(b, wire::Body::Reject, rej.Union()));
  std::vector<uint8_t> bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  auto d = DecodeRemoteRegion(bytes);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kProtocol);

  flatbuffers::FlatBufferBuilder e;
  e.Finish(wire::CreateFrame(e, wire::Body::NONE, 0));
  std::vector<uint8_t> none(e.GetBufferPointer(), e.GetBufferPointer() + e.GetSize());
  d = DecodeRemoteRegion(none);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kProtocol);
}

}  // namespace
}  // namespace ferry
