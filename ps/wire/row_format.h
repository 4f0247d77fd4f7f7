// The server row as a one-sided reader sees it (worker/worker_onesided.cc reads rows straight out
// of a server's registered rows buffer). Servers keep every table with metadata on, so each row
// starts with the same 24 bytes whatever the table's dimension or optimizer:
//
//   struct RemoteRow {
//     uint64_t key;                 //  0: the raw feature id (checked against the pulled key)
//     uint32_t update_count;        //  8
//     uint32_t last_seen;           // 12
//     float    score;               // 16
//     uint32_t version;             // 20: travels with the embedding
//     float    embedding[dim];      // 24
//     ...                           //     optimizer state and padding: never read remotely
//   };
//
// This is a wire contract: the store (store/array_hash_map.h RowLayout) implements it, and
// tests/ps/protocol_test.cc holds the two together for every dimension and optimizer.
#pragma once

#include <cstdint>

namespace ferry::ps {

struct RemoteRowFormat {
  static constexpr uint32_t kKeyOffset = 0;
  static constexpr uint32_t kVersionOffset = 20;
  static constexpr uint32_t kEmbeddingOffset = 24;
  // Bytes a one-sided read of one row moves: [key .. embedding end).
  static constexpr uint64_t ReadBytes(uint32_t dim) { return kEmbeddingOffset + uint64_t{4} * dim; }
};

}  // namespace ferry::ps
