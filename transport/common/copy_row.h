// CopyRow: the per-row copy of the backends' sparse paths (internal; not part of the public
// transport interface, which is transport.h).
//
// Contract: copies `len` bytes from `src` to `dst`; the ranges must not overlap (as memcpy).
// Thread-safe, never blocks, touches nothing outside [dst, dst + len).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferry::common {

// The first and the last N bytes of a row of N <= len <= 2N bytes: together they cover it.
template <uint64_t N>
inline void CopyEnds(uint8_t* dst, const uint8_t* src, uint64_t len) {
  std::memcpy(dst, src, N);
  std::memcpy(dst + len - N, src + len - N, N);
}

// Parameter-server rows are small (tens to a few hundred bytes) and a sparse call carries
// thousands of them. Why not plain memcpy: with a run-time length every row is a libc call (PLT,
// size dispatch), which for 64 B rows scattered over a partition larger than L2 took 70 ns a
// row on this machine against 41 ns for two fixed-size copies (microbenchmark of the ucx
// shared-mapping loop, 2026-11-22). Up to 64 bytes a row is therefore two overlapping
// fixed-size copies, which the compiler emits as a few plain moves (the overlap writes the same
// bytes twice); longer rows go to memcpy, whose fast paths win there.
inline void CopyRow(uint8_t* dst, const uint8_t* src, uint64_t len) {
  if (len > 64) {
    std::memcpy(dst, src, len);
  } else if (len >= 32) {
    CopyEnds<32>(dst, src, len);
  } else if (len >= 16) {
    CopyEnds<16>(dst, src, len);
  } else if (len >= 8) {
    CopyEnds<8>(dst, src, len);
  } else if (len >= 4) {
    CopyEnds<4>(dst, src, len);
  } else {
    for (uint64_t i = 0; i < len; ++i) dst[i] = src[i];
  }
}

// ScatterRow: CopyRow for a row that lands at a scattered place the copying thread will not read
// (the target side of a sparse write: the same-host engine's copy into the peer's memory, the
// tcp and ucx software targets' scatter out of a receive buffer).
//
// Why: a plain store to a line that is not in this core's cache first reads the line (a
// read-for-ownership) and later writes it back, so a scattered row costs two memory transfers.
// A row of whole, aligned 64-byte lines is written with non-temporal stores instead, which fill
// write-combining buffers and write the lines without reading them. Measured on this machine
// (64 MiB region, random row-aligned places, one core): 64 B rows 21-29 -> 49-59 M rows/s,
// 256 B rows 6.7-9.4 -> 19-27 M rows/s; the memcpy gather of the same rows (the pack side of
// pack-then-send, random loads) ran 10-19 M rows/s. Other rows (short, odd lengths, unaligned)
// use CopyRow. The lines leave this core's cache: a reader elsewhere fetches them from memory,
// as it would fetch them from this core's cache otherwise.
//
// Contract: as CopyRow, plus: after the last ScatterRow of a batch and before anything tells
// another thread or process that the rows have landed (a completion, a reply, a notification),
// call ScatterFence(): non-temporal stores are not ordered with later ordinary stores.
inline bool ScatterIsStreamed(const uint8_t* dst, uint64_t len) {
#if defined(__SSE2__)
  return len >= 64 && (len & 63) == 0 && (reinterpret_cast<uintptr_t>(dst) & 63) == 0;
#else
  (void)dst;
  (void)len;
  return false;
#endif
}

inline void ScatterRow(uint8_t* dst, const uint8_t* src, uint64_t len) {
#if defined(__SSE2__)
  if (ScatterIsStreamed(dst, len)) {
    for (uint64_t o = 0; o < len; o += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + o), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + o + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + o + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + o + 48), d);
    }
    return;
  }
#endif
  CopyRow(dst, src, len);
}

inline void ScatterFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace ferry::common
