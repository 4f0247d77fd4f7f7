// The packed segment table (layout and example in segment_codec.h).
#include "transport/common/segment_codec.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "transport/common/bytes.h"

namespace ferry::common {
namespace {

// Unsigned LEB128: 7 bits a byte, the high bit says "more".
inline uint8_t* PutVarint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}

inline int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Reads one varint from [*p, end); false if it runs past the end or over 64 bits.
inline bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  uint64_t out = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (*p == end) return false;
    const uint8_t b = *(*p)++;
    if (shift == 63 && b > 1) return false;  // bits beyond 64
    out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (b < 0x80) {
      *v = out;
      return true;
    }
  }
  return false;
}

Status Bad(const std::string& what) {
  return ProtocolError("packed segment table: " + what);
}

}  // namespace

size_t EncodePackedTable(std::span<const Segment> segments, std::vector<uint8_t>* out) {
  // Pass 1: one length for all, and the largest power of two dividing every offset and length.
  const uint64_t first = segments.empty() ? 0 : segments.front().length;
  bool uniform = true;
  uint64_t bits = first;
  for (const Segment& s : segments) {
    uniform = uniform && s.length == first;
    bits |= s.remote_offset | s.length;
  }
  const unsigned shift = bits == 0 ? 0 : static_cast<unsigned>(std::countr_zero(bits));
  const size_t start = out->size();
  out->resize(start + kPackedHeaderSize + segments.size() * kPackedMaxEntry);
  uint8_t* h = out->data() + start;
  h[0] = kPackedTableVersion;
  h[1] = uniform ? kPackedUniform : 0;
  h[2] = static_cast<uint8_t>(shift);
  h[3] = 0;
  PutLe32(h + 4, static_cast<uint32_t>(segments.size()));
  PutLe64(h + 8, uniform ? first : 0);
  // Pass 2: the entries.
  uint8_t* p = h + kPackedHeaderSize;
  uint64_t prev = 0;
  for (const Segment& s : segments) {
    const uint64_t cur = s.remote_offset >> shift;
    p = PutVarint(p, ZigZag(static_cast<int64_t>(cur - prev)));
    if (!uniform) p = PutVarint(p, s.length >> shift);
    prev = cur;
  }
  const size_t used = static_cast<size_t>(p - h);
  out->resize(start + used);
  return used;
}

Status DecodePackedTable(std::span<const uint8_t> bytes, uint64_t expected_count,
                         std::vector<Segment>* out, uint64_t* total) {
  if (bytes.size() < kPackedHeaderSize) {
    return Bad(std::to_string(bytes.size()) + " bytes, shorter than its header");
  }
  const uint8_t* h = bytes.data();
  const uint8_t flags = h[1];
  const unsigned shift = h[2];
  if (h[0] != kPackedTableVersion) return Bad("version " + std::to_string(h[0]) + " unknown");
  if ((flags & ~kPackedUniform) != 0 || h[3] != 0) return Bad("unknown flags");
  if (shift > 62) return Bad("shift " + std::to_string(shift) + " too large");
  const uint32_t count = GetLe32(h + 4);
  const uint64_t uniform_length = GetLe64(h + 8);
  const bool uniform = (flags & kPackedUniform) != 0;
  if (count != expected_count) {
    return Bad(std::to_string(count) + " segments, but the request announced " +
               std::to_string(expected_count));
  }
  if (!uniform && uniform_length != 0) return Bad("a length without the uniform flag");
  // Every entry takes at least one byte (two without a common length): a count the bytes
  // cannot hold is refused before anything is sized by it.
  const size_t min_entry = uniform ? 1 : 2;
  if ((bytes.size() - kPackedHeaderSize) / min_entry < count) {
    return Bad(std::to_string(count) + " segments cannot fit in " + std::to_string(bytes.size()) +
               " bytes");
  }
  out->resize(count);
  const uint8_t* p = h + kPackedHeaderSize;
  const uint8_t* end = h + bytes.size();
  const uint64_t limit = std::numeric_limits<uint64_t>::max() >> shift;
  uint64_t cur = 0;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t zz = 0;
    if (!GetVarint(&p, end, &zz)) return Bad("entry " + std::to_string(i) + " is cut short");
    const int64_t delta = UnZigZag(zz);
    // The new offset, in units, must stay in [0, limit]: no wrap in either direction.
    if ((delta < 0 && static_cast<uint64_t>(-(delta + 1)) >= cur) ||
        (delta > 0 && static_cast<uint64_t>(delta) > limit - cur)) {
      return Bad("entry " + std::to_string(i) + " moves the offset out of range");
    }
    cur += static_cast<uint64_t>(delta);
    uint64_t length = uniform_length;
    if (!uniform) {
      uint64_t units = 0;
      if (!GetVarint(&p, end, &units)) return Bad("entry " + std::to_string(i) + " is cut short");
      if (units > limit) return Bad("entry " + std::to_string(i) + " has an oversized length");
      length = units << shift;
    }
    if (length > std::numeric_limits<uint64_t>::max() - sum) {
      return Bad("segment lengths overflow");
    }
    sum += length;
    Segment& s = (*out)[i];
    s.local_offset = 0;
    s.remote_offset = cur << shift;
    s.length = length;
  }
  if (p != end) {
    return Bad(std::to_string(end - p) + " bytes left over after " + std::to_string(count) +
               " segments");
  }
  *total = sum;
  return Status::Ok();
}

}  // namespace ferry::common
