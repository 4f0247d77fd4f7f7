// Feature hashing: every input feature becomes a 64-bit id, with no dictionary pass.
//
//   HashToken(field, "68fd1e64", seed)  categorical tokens (Criteo C-columns, bucketized ints)
//   HashIndex(field, 123456, seed)      integer feature indices (LIBSVM, libffm)
//
// Both are XXH3_64bits_withSeed over the token bytes (or the index as 8 little-endian bytes),
// with a per-field seed derived from `seed`, so the same token in two fields gives two unrelated
// ids ("field-aware"). Ids are stable across runs, machines and thread counts for a given seed.
//
// Reserved ids: ids below kReservedIds (16) are never produced, with or without masking, so the
// trainer may use small ids (0: bias, ...) for features of its own without colliding with data.
//
// Masking: hash_bits = 0 keeps all 64 bits; 8..63 keeps the low hash_bits bits (a table of
// 2^hash_bits rows); 64 is the same as 0. Values 1..7 are rejected by ValidateHashBits (they
// would leave almost nothing but the reserved range).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "transport/status.h"

namespace ferry::models {

inline constexpr uint64_t kReservedIds = 16;

// Ok for 0 and 8..64; InvalidArgument otherwise.
Status ValidateHashBits(uint32_t hash_bits);

// Masks an id to hash_bits (0 or 64: unchanged) and moves ids that land below kReservedIds out
// of the reserved range. Precondition: ValidateHashBits(hash_bits).ok().
inline uint64_t MaskId(uint64_t id, uint32_t hash_bits) {
  if (hash_bits != 0 && hash_bits < 64) id &= (uint64_t{1} << hash_bits) - 1;
  return id < kReservedIds ? id + kReservedIds : id;
}

// Id of a categorical token in a field. Precondition: ValidateHashBits(hash_bits).ok().
uint64_t HashToken(uint32_t field, std::string_view token, uint64_t seed, uint32_t hash_bits = 0);
// Id of an integer feature index in a field. Precondition: ValidateHashBits(hash_bits).ok().
uint64_t HashIndex(uint32_t field, uint64_t index, uint64_t seed, uint32_t hash_bits = 0);

// In place, for the parsers' inner loops (one call per line instead of per feature, so the
// hashes of a line pipeline): ids[i] = HashIndex(field, ids[i], seed, hash_bits), or with
// fields[i] in place of field (HashFieldIndices).
void HashIndices(uint32_t field, uint64_t* ids, size_t n, uint64_t seed, uint32_t hash_bits);
void HashFieldIndices(const uint32_t* fields, uint64_t* ids, size_t n, uint64_t seed,
                      uint32_t hash_bits);

}  // namespace ferry::models
