// The byte codec of the backends' own wire formats: fixed-width little-endian integers stored
// at any alignment (tcp frame headers, ucx transport_data, handshake length prefixes).
//
// Contract: pure inline functions; `p` must have room for the width. Thread-safe.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ferry::common {

static_assert(std::endian::native == std::endian::little,
              "the wire formats are little-endian and stored with memcpy");

template <typename T>
inline void PutLe(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}
template <typename T>
inline T GetLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void PutLe16(uint8_t* p, uint16_t v) {
  PutLe(p, v);
}
inline void PutLe32(uint8_t* p, uint32_t v) {
  PutLe(p, v);
}
inline void PutLe64(uint8_t* p, uint64_t v) {
  PutLe(p, v);
}
inline uint16_t GetLe16(const uint8_t* p) {
  return GetLe<uint16_t>(p);
}
inline uint32_t GetLe32(const uint8_t* p) {
  return GetLe<uint32_t>(p);
}
inline uint64_t GetLe64(const uint8_t* p) {
  return GetLe<uint64_t>(p);
}

// Appends v to *out.
inline void AppendLe32(std::vector<uint8_t>* out, uint32_t v) {
  uint8_t b[4];
  PutLe32(b, v);
  out->insert(out->end(), b, b + 4);
}
inline void AppendLe64(std::vector<uint8_t>* out, uint64_t v) {
  uint8_t b[8];
  PutLe64(b, v);
  out->insert(out->end(), b, b + 8);
}

}  // namespace ferry::common
