// Cursor and TxItem (cursor.h): turning transfers into iovecs without copying, and tracking
// partial sendmsg()/readv() progress so that transfers of any size stream.
//
// Worked example: a sparse write of segments {len 3, len 0, len 5} after 4 bytes were sent sits
// at idx 2, off 1, remaining 4; Fill() then yields one iovec {base + seg[2].offset + 1, 4}.
// Zero-length segments are skipped and never produce an iovec.
#include "transport/tcp/cursor.h"

#include <algorithm>
#include <cstring>

#include "transport/common/copy_row.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {
namespace {

uint64_t SegOffset(const Cursor& c, const Segment& s) {
  return c.remote_side ? s.remote_offset : s.local_offset;
}

}  // namespace

// The one walk over a segment cursor's next n bytes (n <= remaining): visit(row, take) for each
// non-empty piece, at base + the segment's local or remote offset, then advance.
template <typename Visit>
void Cursor::WalkSegments(uint64_t n, Visit&& visit) {
  remaining -= n;
  while (n > 0) {  // n <= bytes left, so idx stays below nsegs
    const Segment& s = segs[idx];
    const uint64_t left = s.length - off;
    const uint64_t take = std::min(left, n);
    if (take > 0) {
      visit(base + SegOffset(*this, s) + off, take);
      n -= take;
    }
    if (take == left) {
      ++idx;
      off = 0;
    } else {
      off += take;
    }
  }
}

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
  // Segments that touch in memory (row i ends where row i+1 starts, common for an initiator's
  // packed source rows) share one iovec: the kernel's cost is per iovec, not per byte. Merging
  // stops at kFillBytes so that a long mergeable run is not walked far beyond what one system
  // call can move, and the first run is memoized (run_*): a readv() moves ~64-256 KiB of a
  // 6.4 MB run, and re-walking the run's 100 000 rows on each call took 22 % of an initiator's
  // samples in a 100 000 x 64 B sparse read.
  size_t count = 0;
  uint64_t left = remaining;
  uint64_t added = 0;
  size_t i = idx;
  uint64_t o = off;
  bool first_run = true;  // still inside the run that starts at the current position
  if (run_end != nullptr && remaining >= run_rem) {
    // Known run: emit it whole and walk on from where it was last seen to end.
    const uint64_t d = remaining - run_rem;
    if (d > 0) {
      iov[count++] = {run_end - d, d};
      added = d;
      left -= d;
    }
    i = run_idx;
    o = run_off;
  }
  for (; i < nsegs && left > 0 && added < kFillBytes;) {
    const Segment& s = segs[i];
    if (s.length == o) {
      ++i;
      o = 0;
      continue;
    }
    const uint64_t n = std::min(s.length - o, left);
    uint8_t* p = base + SegOffset(*this, s) + o;
    if (count > 0 && static_cast<uint8_t*>(iov[count - 1].iov_base) + iov[count - 1].iov_len == p) {
      iov[count - 1].iov_len += n;
    } else {
      if (count == 1 && first_run) {  // the first run ends before this piece
        first_run = false;
        Memo(i, o, iov[0]);
      }
      if (count == max) break;
      iov[count++] = {p, n};
    }
    added += n;
    left -= n;
    if (n == s.length - o) {
      ++i;
      o = 0;
    } else {
      o += n;
    }
  }
  if (first_run && count > 0) Memo(i, o, iov[0]);
  *bytes += added;
  return count;
}

void Cursor::Memo(size_t at_idx, uint64_t at_off, const iovec& first) const {
  // `first` starts at the current position, so the run ends first.iov_len bytes further on.
  run_idx = at_idx;
  run_off = at_off;
  run_end = static_cast<uint8_t*>(first.iov_base) + first.iov_len;
  run_rem = remaining - first.iov_len;
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
  if (discard || segs == nullptr) {
    if (!discard && n > 0) std::memcpy(base + off, src, n);
    Advance(n);
    return;
  }
  // The bounce scatter of small rows runs here once per row: one copy, no iovec building. On
  // the target (remote offsets) the rows are scattered over the region: whole aligned lines go
  // with non-temporal stores (common::ScatterRow; the frame's end fences them).
  if (remote_side) {
    WalkSegments(n, [&](uint8_t* row, uint64_t take) {
      common::ScatterRow(row, src, take);
      src += take;
    });
  } else {
    WalkSegments(n, [&](uint8_t* row, uint64_t take) {
      common::CopyRow(row, src, take);
      src += take;
    });
  }
}

uint64_t Cursor::GatherOut(uint8_t* dst, uint64_t max) {
  uint64_t n = std::min(max, remaining);
  const uint64_t moved = n;
  if (discard || segs == nullptr) {
    if (!discard && n > 0) std::memcpy(dst, base + off, n);
    Advance(n);
    return moved;
  }
  WalkSegments(n, [&](const uint8_t* row, uint64_t take) {
    common::CopyRow(dst, row, take);
    dst += take;
  });
  return moved;
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
  if (gather) {
    if (chunk_off < chunk_len && count < max) {
      iov[count++] = {const_cast<uint8_t*>(chunk) + chunk_off, chunk_len - chunk_off};
      *bytes_out += chunk_len - chunk_off;
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
  if (gather) {
    const uint64_t x = std::min(n, chunk_len - chunk_off);
    chunk_off += x;
    return used + x;
  }
  const uint64_t d = std::min(n, data.remaining);
  if (d > 0) data.Advance(d);
  return used + d;
}

uint64_t TxItem::left() const {
  const uint64_t n = (kHeaderSize - header_done) + (table_len - table_done);
  if (data_is_text) return n + text.size() - text_done;
  return n + data.remaining + (gather ? chunk_len - chunk_off : 0);
}

bool TxItem::done() const {
  return header_done == kHeaderSize && table_done == table_len &&
         (data_is_text ? text_done == text.size()
                       : data.remaining == 0 && (!gather || chunk_off == chunk_len));
}

}  // namespace ferry::tcp
