// What a benchmark run does: the configuration both peers agree on, and its wire encoding.
//
// The client owns the configuration; it sends it to the server in the connection handshake
// (TransportOptions::hello_info), the way ucx_perftest's client ships its parameters, so a server
// needs only --transport and an address. DecodeConfig treats the bytes as hostile: every field is
// type- and range-checked; a malformed config is a clear kInvalidArgument/kProtocol error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.h"

namespace ferry::bench {

enum class Mode : uint8_t { kLatency, kBandwidth };
// kPackWrite / kPackRead are the pack-then-send references of the sparse ops (bandwidth only):
//   pack_write  the initiator gathers the rows from random places of its own region into a
//               contiguous buffer (memcpy per row), then writes that buffer (one contiguous
//               write); the mirror image of sparse_write, which scatters on the target.
//   pack_read   the initiator sends a 16-byte request; the target gathers the rows into a
//               contiguous buffer and sends it back (two-sided): a pull served by packing, the
//               reference of sparse_read.
enum class BenchOp : uint8_t {
  kSend,
  kWrite,
  kRead,
  kWriteImm,
  kSparseWrite,
  kSparseRead,
  kPackWrite,
  kPackRead
};

// How a pass checks its transfers (see --check):
//   kFull  every transfer carries a seeded pattern and is verified on arrival (or, for writes
//          without notification, the final content of every slot); rotating buffers so that no
//          check races the next transfer. The checked pass.
//   kRef   as the reference tools (perftest, ucx_perftest): latency ops see arrival by the last
//          byte (a tag) or the completion, bandwidth ops are not checked, and every bandwidth op
//          uses the same source and target buffer (the reference's working set). The timed pass.
enum class Check : uint8_t { kFull, kRef };
// Which passes a run makes per size: kBoth = a checked pass (kFull), then the timed pass (kRef).
enum class CheckPolicy : uint8_t { kBoth, kFull, kRef };

// pack_read: requests in flight per endpoint (its request buffers live in a fixed area).
inline constexpr uint32_t kMaxPackReadDepth = 64;

std::string_view ModeName(Mode mode);
std::string_view BenchOpName(BenchOp op);
Result<BenchOp> ParseBenchOp(std::string_view name);
std::string_view CheckName(Check check);
std::string_view CheckPolicyName(CheckPolicy policy);
Result<CheckPolicy> ParseCheckPolicy(std::string_view name);
// Inline: the timed loops ask these per turn.
// A segment list per op (sparse_write, sparse_read).
inline bool IsSparse(BenchOp op) {
  return op == BenchOp::kSparseWrite || op == BenchOp::kSparseRead;
}
inline bool IsPack(BenchOp op) {  // pack_write, pack_read
  return op == BenchOp::kPackWrite || op == BenchOp::kPackRead;
}
inline bool UsesRows(BenchOp op) {  // sizes are rows * row_size: sparse and pack ops
  return IsSparse(op) || IsPack(op);
}
inline bool IsRead(BenchOp op) {  // one-sided reads (read, sparse_read)
  return op == BenchOp::kRead || op == BenchOp::kSparseRead;
}

struct BenchConfig {
  Mode mode = Mode::kLatency;
  BenchOp op = BenchOp::kSend;
  std::vector<uint64_t> sizes = {2};       // message sizes; sparse ops use rows * row_size instead
  uint64_t iters = 1000;                   // measured iterations per size (when duration_s == 0)
  double duration_s = 0;                   // > 0: run each size for this long instead of `iters`
  uint64_t warmup = 16;                    // unmeasured iterations before each size
  uint32_t depth = 16;                     // outstanding operations per endpoint (bandwidth)
  bool bidir = false;                      // both sides send (bandwidth)
  uint32_t endpoints = 1;                  // data endpoints (per direction)
  uint32_t threads = 1;                    // worker threads per side
  CheckPolicy check = CheckPolicy::kBoth;  // the passes per size (Check)
  uint64_t rows = 64;                      // sparse: rows per operation
  uint64_t row_size = 256;                 // sparse: bytes per row
  uint64_t region_size = 64ull << 20;      // sparse: target region the rows are scattered in
  uint64_t seed = 1;                       // base seed of every pattern and row choice
  uint64_t timeout_ms = 10000;             // no progress for this long is an error, never a hang
};

// Range and consistency checks (also applied to a decoded config).
Status ValidateConfig(const BenchConfig& config);

std::vector<uint8_t> EncodeConfig(const BenchConfig& config);
Result<BenchConfig> DecodeConfig(std::span<const uint8_t> bytes);

// Bytes one operation moves: size, or rows * row_size for sparse and pack ops.
uint64_t OpBytes(const BenchConfig& config, uint64_t size);

// The phases of a run, in order: every size, each with the passes of config.check. Both sides
// compute the same list.
struct PhaseSpec {
  uint64_t size = 0;
  Check check = Check::kFull;
};
std::vector<PhaseSpec> PhaseSpecs(const BenchConfig& config);

// perftest's -a sweep: 2, 4, ..., 8 MiB.
std::vector<uint64_t> SweepSizes();

// Parses "64", "4K", "1M", "8MiB", "2G" (binary units). Rejects 0 and garbage.
Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace ferry::bench
