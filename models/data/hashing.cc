#include "models/data/hashing.h"

#include <bit>
#include <cstring>
#include <string>

// Inlined XXH3: the readers hash every feature, and a call into the shared library per feature
// costs as much as the hash of an 8-byte index itself.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ferry::models {
namespace {

// Per-field seed. Multiplying (field + 1) by an odd constant is a bijection on 64-bit integers,
// so two fields never share a seed for a given base seed.
uint64_t FieldSeed(uint64_t seed, uint32_t field) {
  return seed + (uint64_t{field} + 1) * 0x9E3779B97F4A7C15ull;
}

}  // namespace

Status ValidateHashBits(uint32_t hash_bits) {
  if (hash_bits == 0 || (hash_bits >= 8 && hash_bits <= 64)) return Status::Ok();
  return InvalidArgument("hash_bits " + std::to_string(hash_bits) +
                         " is out of range; use 0 (all 64 bits) or 8..64");
}

uint64_t HashToken(uint32_t field, std::string_view token, uint64_t seed, uint32_t hash_bits) {
  return MaskId(XXH3_64bits_withSeed(token.data(), token.size(), FieldSeed(seed, field)),
                hash_bits);
}

namespace {

inline uint64_t HashIndexInline(uint64_t field_seed, uint64_t index, uint32_t hash_bits) {
  // The index as 8 little-endian bytes. One 8-byte store: byte-by-byte stores that XXH3 then
  // reads back as words stall store forwarding and cost more than the hash itself.
  if constexpr (std::endian::native == std::endian::big) index = __builtin_bswap64(index);
  unsigned char le[8];
  std::memcpy(le, &index, sizeof le);
  return MaskId(XXH3_64bits_withSeed(le, sizeof le, field_seed), hash_bits);
}

}  // namespace

uint64_t HashIndex(uint32_t field, uint64_t index, uint64_t seed, uint32_t hash_bits) {
  return HashIndexInline(FieldSeed(seed, field), index, hash_bits);
}

void HashIndices(uint32_t field, uint64_t* ids, size_t n, uint64_t seed, uint32_t hash_bits) {
  const uint64_t field_seed = FieldSeed(seed, field);
  for (size_t i = 0; i < n; ++i) ids[i] = HashIndexInline(field_seed, ids[i], hash_bits);
}

void HashFieldIndices(const uint32_t* fields, uint64_t* ids, size_t n, uint64_t seed,
                      uint32_t hash_bits) {
  for (size_t i = 0; i < n; ++i) {
    ids[i] = HashIndexInline(FieldSeed(seed, fields[i]), ids[i], hash_bits);
  }
}

}  // namespace ferry::models
