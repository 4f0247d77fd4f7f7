// gather — single-thread memcpy gather of randomly placed rows into a contiguous buffer.
// The "pack" reference for Ferry's sparse transfers: how many rows/s one core can copy.
// Usage: gather ROWS ROW_SIZE [REGION_BYTES] [MIN_SECONDS]
// Prints: rows,row_size,calls,seconds,rows_per_sec,gb_per_sec
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ROWS ROW_SIZE [REGION_BYTES] [MIN_SECONDS]\n", argv[0]);
    return 2;
  }
  const uint64_t rows = std::strtoull(argv[1], nullptr, 10);
  const uint64_t row_size = std::strtoull(argv[2], nullptr, 10);
  const uint64_t region = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : (64ull << 20);
  const double min_seconds = argc > 4 ? std::strtod(argv[4], nullptr) : 0.3;
  if (rows == 0 || row_size == 0 || region < row_size) {
    std::fprintf(stderr, "gather: bad arguments\n");
    return 2;
  }
  const uint64_t slots = region / row_size;
  std::vector<unsigned char> src(region, 1);
  std::vector<unsigned char> dst(rows * row_size);
  // Row-aligned offsets in a random permutation of the region's rows, walked call after call:
  // like ferry-bw's sparse row choice, every call copies rows the previous calls did not touch,
  // so the rows come from wherever they sit in the cache hierarchy for a region of this size.
  // (Copying the same rows every call would keep them in L2 and measure a limit no sparse
  // transfer over fresh rows can reach: 4-5x higher here for 10k x 64 B in a 64 MiB region.)
  std::vector<uint64_t> offs(slots);
  for (uint64_t i = 0; i < slots; ++i) offs[i] = i * row_size;
  std::shuffle(offs.begin(), offs.end(), std::mt19937_64(1));
  for (uint64_t i = 0; i < region; i += 4096) src[i] = static_cast<unsigned char>(i >> 12);

  using Clock = std::chrono::steady_clock;
  uint64_t calls = 0;
  uint64_t next = 0;
  unsigned sink = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    unsigned char* d = dst.data();
    for (uint64_t r = 0; r < rows; ++r) {
      std::memcpy(d, src.data() + offs[next], row_size);
      d += row_size;
      if (++next == slots) next = 0;
    }
    sink += dst[(calls * 7) % dst.size()];
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < min_seconds || calls < 3);
  const double rps = static_cast<double>(rows * calls) / elapsed;
  std::printf("%llu,%llu,%llu,%.6f,%.1f,%.4f\n", static_cast<unsigned long long>(rows),
              static_cast<unsigned long long>(row_size), static_cast<unsigned long long>(calls),
              elapsed, rps, rps * static_cast<double>(row_size) / 1e9);
  return sink == 0xFFFFFFFFu ? 1 : 0;
}
