// tcp frames arrive from peers once the handshake is done. The input is the byte stream a target
// reads from one connection: frame headers, segment tables and payloads back to back. Each frame
// goes through the functions the receive path (transport/tcp/receive.cc) uses, in its order:
// DecodeHeader, ValidateHeader, then for one-sided requests the region lookup against a fake
// region table, CheckRemoteAccess / SegmentTableTotal / CheckSegmentsInRegion, and finally the
// real Cursor and TxItem scatter the payload into (or gather a read response out of) the region.
// Regions are heap buffers of exactly their registered size, so ASan reports any byte placed
// outside; the explicit bounds checks below trap in the replay build (no sanitizer) as well.
// A frame that the receive path would answer with a connection failure ends the stream here.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "transport/common/segment_check.h"
#include "transport/common/segment_codec.h"
#include "transport/tcp/tcp_transport.h"

namespace {

using ferry::Segment;
using ferry::tcp::Cursor;
using ferry::tcp::FrameHeader;
using ferry::tcp::FrameKind;

struct FakeRegion {
  uint64_t key;
  uint32_t access;
  std::vector<uint8_t> bytes;
};

// Every iovec must lie inside [lo, hi); anything else would be a write/read outside the region.
void CheckIov(const iovec& v, const uint8_t* lo, const uint8_t* hi) {
  const auto* p = static_cast<const uint8_t*>(v.iov_base);
  if (v.iov_len == 0) __builtin_trap();  // zero-length segments must never produce an iovec
  if (p < lo || p > hi || v.iov_len > static_cast<size_t>(hi - p)) __builtin_trap();
}

// Scatters up to `avail` input bytes into `dst` the way ReadData does: a first piece through
// CopyIn (bytes that arrived in the look-ahead), the rest through Fill/Advance in uneven chunks
// (partial readv results). Returns the bytes consumed.
uint64_t Scatter(Cursor& dst, const uint8_t* in, uint64_t avail, const uint8_t* lo,
                 const uint8_t* hi, uint32_t chunk_seed) {
  const uint64_t want = std::min(avail, dst.remaining);
  uint64_t done = std::min<uint64_t>(want, chunk_seed % 41);
  if (done > 0) dst.CopyIn(in, done);
  iovec iov[8];
  while (done < want) {
    uint64_t bytes = 0;
    const size_t n = dst.Fill(iov, 1 + chunk_seed % 8, &bytes);
    if (n == 0 || bytes == 0) __builtin_trap();  // bytes remain but no iovec: a stuck stream
    uint64_t got = std::min<uint64_t>(want - done, 1 + (chunk_seed * (done + 7)) % 9000);
    got = std::min(got, bytes);
    uint64_t left = got;
    for (size_t i = 0; i < n && left > 0; ++i) {
      CheckIov(iov[i], lo, hi);
      const uint64_t take = std::min<uint64_t>(left, iov[i].iov_len);
      std::memcpy(iov[i].iov_base, in + done + (got - left), take);
      left -= take;
    }
    dst.Advance(got);
    done += got;
  }
  return done;
}

// Streams a read response out of the region as send.cc does (TxItem::Fill/Advance, partial
// sends). Returns the payload bytes gathered, which must equal the header's length.
uint64_t Gather(ferry::tcp::TxItem& item, const uint8_t* lo, const uint8_t* hi,
                uint32_t chunk_seed) {
  iovec iov[8];
  uint64_t payload = 0;
  volatile uint8_t sink = 0;
  while (!item.done()) {
    uint64_t bytes = 0;
    const size_t n = item.Fill(iov, 1 + chunk_seed % 8, &bytes);
    if (n == 0 || bytes == 0) __builtin_trap();
    const uint64_t sent = std::min<uint64_t>(bytes, 1 + (chunk_seed * (payload + 3)) % 7000);
    uint64_t left = sent;
    for (size_t i = 0; i < n && left > 0; ++i) {
      const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
      const uint64_t take = std::min<uint64_t>(left, iov[i].iov_len);
      const bool header = p >= item.header && p < item.header + ferry::tcp::kHeaderSize;
      if (!header) {
        CheckIov(iov[i], lo, hi);
        payload += take;
      }
      for (uint64_t b = 0; b < take; ++b) sink = sink ^ p[b];  // touch every byte
      left -= take;
    }
    if (item.Advance(sent) != sent) __builtin_trap();
  }
  return payload;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<FakeRegion> regions;
  regions.push_back({0x1111, ferry::kAccessRemote, std::vector<uint8_t>(4096)});
  regions.push_back({0x2222, ferry::kAccessRemoteRead, std::vector<uint8_t>(100)});
  regions.push_back({0x3333, ferry::kAccessRemoteWrite, std::vector<uint8_t>(1)});
  regions.push_back({0x4444, ferry::kAccessRemote, std::vector<uint8_t>()});  // empty region
  std::vector<uint8_t> scratch(ferry::tcp::kScratchSize);
  const ferry::tcp::WireLimits limits{1u << 16, 64};

  size_t pos = 0;
  while (size - pos >= ferry::tcp::kHeaderSize) {
    const FrameHeader h = ferry::tcp::DecodeHeader(data + pos);
    pos += ferry::tcp::kHeaderSize;
    if (!ferry::tcp::ValidateHeader(h, limits).ok()) return 0;  // the connection fails
    // Re-encoding an accepted header must give back the same bytes.
    uint8_t again[ferry::tcp::kHeaderSize];
    ferry::tcp::EncodeHeader(h, again);
    if (std::memcmp(again, data + pos - ferry::tcp::kHeaderSize, sizeof again) != 0) {
      __builtin_trap();
    }
    const uint32_t chunk_seed = static_cast<uint32_t>(h.req_id) * 2654435761u + 1;
    const bool write = h.kind == FrameKind::kWrite || h.kind == FrameKind::kSparseWrite;
    const bool sparse = h.kind == FrameKind::kSparseWrite || h.kind == FrameKind::kSparseRead;
    const uint32_t needed = write ? ferry::kAccessRemoteWrite : ferry::kAccessRemoteRead;
    FakeRegion* region = nullptr;
    for (FakeRegion& r : regions) {
      if (r.key == h.key) region = &r;
    }
    std::vector<Segment> table;
    uint64_t total = h.length;
    if (sparse) {  // ValidateHeader bounded the count by max_segments, a packed table by it
      const uint64_t table_bytes = ferry::tcp::SparseTableBytes(h);
      if (size - pos < table_bytes) return 0;
      if (h.flags & ferry::tcp::kFramePackedTable) {
        ferry::Status s =
            ferry::common::DecodePackedTable(std::span<const uint8_t>(data + pos, table_bytes),
                                             ferry::tcp::SparseCount(h), &table, &total);
        if (!s.ok() || total != h.length) return 0;  // the connection fails
      } else {
        table.resize(h.arg);
        std::memcpy(table.data(), data + pos, table_bytes);
        auto sum = ferry::tcp::SegmentTableTotal(h.kind, table, h.length);
        if (!sum.ok()) return 0;  // the connection fails
        total = *sum;
      }
      pos += table_bytes;
    }
    ferry::Status verdict =
        region != nullptr ? ferry::Status::Ok() : ferry::PermissionDenied("key");
    if (verdict.ok()) {
      const uint64_t rsize = region->bytes.size();
      verdict =
          sparse ? ferry::common::CheckSegmentsInRegion(table, rsize, region->access, needed)
                 : ferry::common::CheckRemoteAccess(rsize, region->access, h.arg, h.length, needed);
    }
    const bool target = h.kind == FrameKind::kWrite || h.kind == FrameKind::kRead || sparse;
    if (target && verdict.ok() && (region->access & needed) != needed) __builtin_trap();
    uint8_t* lo = region != nullptr ? region->bytes.data() : nullptr;
    const uint8_t* hi = region != nullptr ? lo + region->bytes.size() : nullptr;

    if (write || !target) {  // payload follows the header (and table)
      Cursor dst;
      std::vector<uint8_t> landing;
      const uint8_t* dlo = scratch.data();
      const uint8_t* dhi = scratch.data() + scratch.size();
      if (write && verdict.ok()) {
        if (sparse) {
          dst.SetSegments(lo, table.data(), table.size(), true, total);
        } else {
          dst.SetContig(lo + h.arg, h.length);
        }
        dlo = lo;
        dhi = hi;
      } else if (!write && h.kind != FrameKind::kHeartbeat) {
        landing.resize(h.length);  // a message, read response or error text
        dst.SetContig(landing.data(), h.length);
        dlo = landing.data();
        dhi = landing.data() + landing.size();
      } else {
        dst.SetDiscard(scratch.data(), total);  // refused: drained, not a byte lands
      }
      pos += Scatter(dst, data + pos, size - pos, dlo, dhi, chunk_seed);
      if (pos > size) __builtin_trap();
    } else if (verdict.ok()) {  // a read: the response streams out of the region
      ferry::tcp::TxItem item;
      FrameHeader r;
      r.kind = FrameKind::kReadResponse;
      r.req_id = h.req_id;
      r.length = total;
      ferry::tcp::EncodeHeader(r, item.header);
      if (sparse) {
        item.owned_table = table;
        item.data.SetSegments(lo, item.owned_table.data(), item.owned_table.size(), true, total);
      } else {
        item.data.SetContig(lo + h.arg, h.length);
      }
      if (Gather(item, lo, hi, chunk_seed) != total) __builtin_trap();
    }
  }
  return 0;
}
