// Cursor and TxItem: turning transfers into iovecs without copying, and tracking partial
// sendmsg()/readv() progress so that transfers of any size stream.
//
// Worked example: a sparse write of segments {len 3, len 0, len 5} after 4 bytes were sent sits
// at idx 2, off 1, remaining 4; Fill() then yields one iovec {base + seg[2].offset + 1, 4}.
// Zero-length segments are skipped and never produce an iovec.
#include <algorithm>
#include <cstring>

#include "transport/tcp/tcp.h"

namespace ferry::tcp {
namespace {

uint64_t SegOffset(const Cursor& c, const Segment& s) {
  return c.remote_side ? s.remote_offset : s.local_offset;
}

}  // namespace

void Cursor::SetContig(uint8_t* p, uint64_t n) {
  *this = Cursor();
  base = p;
  remaining = n;
}

void Cursor::SetSegments(uint8_t* b, const Segment* s, size_t n, bool remote, uint64_t total) {
  *this = Cursor();
  base = b;
  segs = s;
  nsegs = n;
  remote_side = remote;
  remaining = total;
}

void Cursor::SetDiscard(uint8_t* scratch, uint64_t n) {
  *this = Cursor();
  base = scratch;
  discard = true;
  remaining = n;
}

size_t Cursor::Fill(iovec* iov, size_t max, uint64_t* bytes) const {
  if (remaining == 0 || max == 0) return 0;
  if (discard) {
    const uint64_t n = std::min<uint64_t>(remaining, kScratchSize);
    iov[0] = {base, n};
    *bytes += n;
    return 1;
  }
  if (segs == nullptr) {
    iov[0] = {base + off, remaining};
    *bytes += remaining;
    return 1;
  }
  size_t count = 0;
  uint64_t left = remaining;
  uint64_t o = off;
  for (size_t i = idx; i < nsegs && count < max && left > 0; ++i, o = 0) {
    const Segment& s = segs[i];
    if (s.length == o) continue;
    const uint64_t n = std::min(s.length - o, left);
    iov[count++] = {base + SegOffset(*this, s) + o, n};
    *bytes += n;
    left -= n;
  }
  return count;
}

void Cursor::Advance(uint64_t n) {
  remaining -= n;
  if (discard) return;
  if (segs == nullptr) {
    off += n;
    return;
  }
  while (n > 0) {  // n <= bytes left, so idx stays below nsegs
    const uint64_t left = segs[idx].length - off;
    if (n < left) {
      off += n;
      return;
    }
    n -= left;
    ++idx;
    off = 0;
  }
}

void Cursor::CopyIn(const uint8_t* src, uint64_t n) {
  while (n > 0) {
    iovec v;
    uint64_t got = 0;
    Fill(&v, 1, &got);
    const uint64_t take = std::min<uint64_t>(v.iov_len, n);
    if (!discard) std::memcpy(v.iov_base, src, take);
    Advance(take);
    src += take;
    n -= take;
  }
}

size_t TxItem::Fill(iovec* iov, size_t max, uint64_t* bytes_out) const {
  size_t count = 0;
  if (header_done < kHeaderSize && count < max) {
    iov[count++] = {const_cast<uint8_t*>(header) + header_done, kHeaderSize - header_done};
    *bytes_out += kHeaderSize - header_done;
  }
  if (table_done < table_len && count < max) {
    iov[count++] = {const_cast<uint8_t*>(table) + table_done, table_len - table_done};
    *bytes_out += table_len - table_done;
  }
  if (data_is_text) {
    if (text_done < text.size() && count < max) {
      iov[count++] = {const_cast<char*>(text.data()) + text_done, text.size() - text_done};
      *bytes_out += text.size() - text_done;
    }
    return count;
  }
  return count + data.Fill(iov + count, max - count, bytes_out);
}

uint64_t TxItem::Advance(uint64_t n) {
  uint64_t used = 0;
  const uint64_t h = std::min<uint64_t>(n, kHeaderSize - header_done);
  header_done += static_cast<uint32_t>(h);
  used += h;
  n -= h;
  const uint64_t t = std::min(n, table_len - table_done);
  table_done += t;
  used += t;
  n -= t;
  if (data_is_text) {
    const uint64_t x = std::min<uint64_t>(n, text.size() - text_done);
    text_done += x;
    return used + x;
  }
  const uint64_t d = std::min(n, data.remaining);
  if (d > 0) data.Advance(d);
  return used + d;
}

bool TxItem::done() const {
  return header_done == kHeaderSize && table_done == table_len &&
         (data_is_text ? text_done == text.size() : data.remaining == 0);
}

}  // namespace ferry::tcp
