// The packed segment table: how a sparse request tells the target where its rows go, in a few
// bytes a row instead of a 24-byte ferry::Segment (tcp's frames, ucx's emulated one-sided
// requests). The target needs only each segment's place in its region and its length.
//
// Layout (little-endian):
//
//   struct PackedTableHeader {    // 16 bytes
//     uint8_t  version;           // kPackedTableVersion
//     uint8_t  flags;             // kPackedUniform: every segment is `length` bytes long
//     uint8_t  shift;             // offsets (and lengths) are multiples of 1 << shift, sent >>
//     uint8_t  reserved;          // 0
//     uint32_t count;             // segments that follow
//     uint64_t length;            // kPackedUniform: the common length; else 0
//   };
//   then per segment:  varint zigzag(offset_i >> shift - offset_{i-1} >> shift)   (offset_-1 = 0)
//                     [varint length_i >> shift]                       (without kPackedUniform)
//
// Worked example: rows of 64 B at row 3, row 1000 and row 999 of a region: uniform, shift 6,
// deltas +3, +997, -1 -> varints 06, d2 0f, 01: 4 bytes for three rows (72 as Segments). Random
// rows of a 64 MiB region cost ~3 bytes each (a 20-bit row-index delta).
//
// Contract: pure functions, thread-safe. Encoding allocates only when `out` grows. Decoding
// treats the bytes as hostile: every length, count, varint and sum is checked, a bad table is
// Code::kProtocol naming what was wrong, never a crash. Whether the segments fit the target
// region is the target's later check (segment_check.h), as for unpacked tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::common {

inline constexpr uint8_t kPackedTableVersion = 1;
inline constexpr uint8_t kPackedUniform = 1u << 0;
inline constexpr size_t kPackedHeaderSize = 16;
// The most bytes one segment can take (two 10-byte varints): bounds a table from its count.
inline constexpr size_t kPackedMaxEntry = 20;

// Appends the packed form of the remote side of `segments` (remote_offset, length; local
// offsets are not sent) to *out and returns the bytes appended.
size_t EncodePackedTable(std::span<const Segment> segments, std::vector<uint8_t>* out);

// Decodes a packed table into *out (remote_offset and length set, local_offset 0), replacing
// its content and reusing its capacity. `expected_count` is the count the frame announced;
// `total` receives the sum of the lengths (overflow is an error).
Status DecodePackedTable(std::span<const uint8_t> bytes, uint64_t expected_count,
                         std::vector<Segment>* out, uint64_t* total);

}  // namespace ferry::common
