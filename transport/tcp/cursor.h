// Cursor and TxItem: how the tcp backend turns transfers into iovecs without copying, and
// tracks partial sendmsg()/readv() progress so that transfers of any size stream (cursor.cc has
// a worked example).
//
// Contract: plain state, no locking (the transport's mutex guards every instance); no allocation
// except TxItem's error text, and the tables of sparse requests and read responses, which the
// connection recycles (their capacity is kept).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace ferry::tcp {

inline constexpr size_t kScratchSize = 64 * 1024;   // sink for refused payloads
inline constexpr uint64_t kFillBytes = 8ull << 20;  // Cursor::Fill stops merging runs here

// Walks the bytes of one transfer: a contiguous range, a segment list (local or remote offsets
// of ferry::Segment), or a discard sink that reuses one scratch buffer. Used both to gather
// (sendmsg) and to scatter (readv).
struct Cursor {
  uint8_t* base = nullptr;
  const Segment* segs = nullptr;  // null: contiguous [base + done, +remaining)
  size_t nsegs = 0;
  bool remote_side = false;  // segments: use remote_offset (target) instead of local_offset
  bool discard = false;      // base is a scratch buffer of kScratchSize bytes
  size_t idx = 0;            // current segment
  uint64_t off = 0;          // bytes done in the current segment / contiguous range
  uint64_t remaining = 0;
  // Memo of Fill's first merged run, so that a long run of touching segments (an initiator's
  // packed rows) is walked once per transfer, not once per readv()/sendmsg() that moves a part
  // of it: from the current position up to segment position (run_idx, run_off), where
  // `remaining` will be run_rem, memory is one range ending at run_end. Valid while
  // remaining >= run_rem (positions only move forward); run_end null: none.
  mutable size_t run_idx = 0;
  mutable uint64_t run_off = 0;
  mutable uint64_t run_rem = 0;
  mutable uint8_t* run_end = nullptr;

  void SetContig(uint8_t* p, uint64_t n);
  void SetSegments(uint8_t* b, const Segment* s, size_t n, bool remote, uint64_t total);
  void SetDiscard(uint8_t* scratch, uint64_t n);
  // Appends up to `max` iovecs from the current position; returns how many, adds their bytes.
  // Segments adjacent in memory are merged into one iovec (at most kFillBytes per call).
  size_t Fill(iovec* iov, size_t max, uint64_t* bytes) const;
  void Advance(uint64_t n);
  // Copies n bytes (n <= remaining) in at the current position and advances (a discard cursor
  // only advances). The target's scatter (remote_side segments) uses common::ScatterRow: the
  // caller fences (common::ScatterFence) before it reports the rows as landed.
  void CopyIn(const uint8_t* src, uint64_t n);
  // The reverse: copies min(max, remaining) bytes out from the current position into dst and
  // advances; returns how many (a sparse read response gathered through a scratch buffer).
  uint64_t GatherOut(uint8_t* dst, uint64_t max);

 private:
  template <typename Visit>
  void WalkSegments(uint64_t n, Visit&& visit);
  void Memo(size_t at_idx, uint64_t at_off, const iovec& first) const;
};

// One frame (or reply) waiting to be sent: header, optional segment table, payload.
struct TxItem {
  uint8_t header[kHeaderSize] = {};
  uint32_t header_done = 0;
  const uint8_t* table = nullptr;  // sparse requests: `packed`, or the caller's Segment array
  uint64_t table_len = 0;
  uint64_t table_done = 0;
  std::vector<uint8_t> packed;  // a sparse request's packed table (segment_codec.h)
  Cursor data;
  // A sparse read response of small rows: `data` is gathered chunk by chunk into the
  // connection's tx scratch (FlushTx, only while the item is at the front of the queue) and sent
  // from there, instead of one iovec per row. [chunk + chunk_off, chunk + chunk_len) is unsent.
  bool gather = false;
  const uint8_t* chunk = nullptr;
  uint64_t chunk_off = 0;
  uint64_t chunk_len = 0;
  bool data_is_text = false;  // payload is `text` (error responses); pointer taken at Fill time
  std::string text;
  uint64_t text_done = 0;
  // On completion of the send:
  bool complete_send = false;  // a two-sided send: queue its completion
  uint64_t context = 0;
  uint64_t bytes = 0;
  uint64_t pin_key = 0;              // target region pinned while this read response streams
  std::vector<Segment> owned_table;  // sparse read response: the request's segments

  bool started() const { return header_done > 0; }
  size_t Fill(iovec* iov, size_t max, uint64_t* bytes_out) const;
  // Consumes up to n sent bytes; returns how many belonged to this item.
  uint64_t Advance(uint64_t n);
  bool done() const;
  // Bytes of this item not sent yet.
  uint64_t left() const;
};

}  // namespace ferry::tcp
