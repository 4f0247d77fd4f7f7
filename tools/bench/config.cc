#include "tools/bench/config.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

namespace ferry::bench {
namespace {

constexpr uint64_t kMaxSize = 1ull << 30;
constexpr uint32_t kMaxEndpoints = 1024;
constexpr uint32_t kMaxThreads = 256;
constexpr uint32_t kMaxDepth = 4096;
constexpr BenchOp kAllOps[] = {BenchOp::kSend,      BenchOp::kWrite,       BenchOp::kRead,
                               BenchOp::kWriteImm,  BenchOp::kSparseWrite, BenchOp::kSparseRead,
                               BenchOp::kPackWrite, BenchOp::kPackRead};
constexpr CheckPolicy kAllPolicies[] = {CheckPolicy::kBoth, CheckPolicy::kFull, CheckPolicy::kRef};

}  // namespace

std::string_view ModeName(Mode mode) {
  return mode == Mode::kLatency ? "latency" : "bandwidth";
}

std::string_view BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kSend:
      return "send";
    case BenchOp::kWrite:
      return "write";
    case BenchOp::kRead:
      return "read";
    case BenchOp::kWriteImm:
      return "write_imm";
    case BenchOp::kSparseWrite:
      return "sparse_write";
    case BenchOp::kSparseRead:
      return "sparse_read";
    case BenchOp::kPackWrite:
      return "pack_write";
    case BenchOp::kPackRead:
      return "pack_read";
  }
  return "?";
}

std::string_view CheckName(Check check) {
  return check == Check::kFull ? "full" : "ref";
}

std::string_view CheckPolicyName(CheckPolicy policy) {
  switch (policy) {
    case CheckPolicy::kBoth:
      return "both";
    case CheckPolicy::kFull:
      return "full";
    case CheckPolicy::kRef:
      return "ref";
  }
  return "?";
}

Result<CheckPolicy> ParseCheckPolicy(std::string_view name) {
  for (CheckPolicy p : kAllPolicies) {
    if (CheckPolicyName(p) == name) return p;
  }
  return InvalidArgument("unknown check policy '" + std::string(name) +
                         "' (expected both, full or ref)");
}

Result<BenchOp> ParseBenchOp(std::string_view name) {
  for (BenchOp op : kAllOps) {
    if (BenchOpName(op) == name) return op;
  }
  return InvalidArgument("unknown op '" + std::string(name) +
                         "' (expected send, write, read, write_imm, sparse_write, sparse_read, "
                         "pack_write or pack_read)");
}

uint64_t OpBytes(const BenchConfig& config, uint64_t size) {
  return UsesRows(config.op) ? config.rows * config.row_size : size;
}

std::vector<PhaseSpec> PhaseSpecs(const BenchConfig& config) {
  std::vector<PhaseSpec> out;
  const std::vector<uint64_t> sizes =
      UsesRows(config.op) ? std::vector<uint64_t>{config.rows * config.row_size} : config.sizes;
  for (uint64_t size : sizes) {
    if (config.check != CheckPolicy::kRef) out.push_back({size, Check::kFull});
    if (config.check != CheckPolicy::kFull) out.push_back({size, Check::kRef});
  }
  return out;
}

std::vector<uint64_t> SweepSizes() {
  std::vector<uint64_t> sizes;
  for (uint64_t s = 2; s <= (8ull << 20); s *= 2) sizes.push_back(s);
  return sizes;
}

Status ValidateConfig(const BenchConfig& c) {
  if (c.sizes.empty()) return InvalidArgument("no message size given");
  for (uint64_t s : c.sizes) {
    if (s == 0 || s > kMaxSize) {
      return InvalidArgument("message size " + std::to_string(s) + " outside [1, 1 GiB]");
    }
  }
  if (c.duration_s < 0 || !std::isfinite(c.duration_s) || c.duration_s > 86400) {
    return InvalidArgument("duration must be between 0 and 86400 seconds");
  }
  if (c.duration_s == 0 && c.iters == 0) return InvalidArgument("iterations must be at least 1");
  if (c.iters > (1ull << 40) || c.warmup > (1ull << 40)) {
    return InvalidArgument("iteration count too large");
  }
  if (c.depth == 0 || c.depth > kMaxDepth) {
    return InvalidArgument("depth must be in [1, " + std::to_string(kMaxDepth) + "]");
  }
  if (c.endpoints == 0 || c.endpoints > kMaxEndpoints) {
    return InvalidArgument("endpoints must be in [1, " + std::to_string(kMaxEndpoints) + "]");
  }
  if (c.threads == 0 || c.threads > kMaxThreads) {
    return InvalidArgument("threads must be in [1, " + std::to_string(kMaxThreads) + "]");
  }
  if (c.threads > c.endpoints) {
    return InvalidArgument("threads (" + std::to_string(c.threads) + ") exceed endpoints (" +
                           std::to_string(c.endpoints) + "); each thread needs an endpoint");
  }
  if (c.bidir && c.mode == Mode::kLatency) {
    return InvalidArgument("--bidir applies to bandwidth tests only (latency is a ping-pong)");
  }
  if (IsPack(c.op) && (c.mode != Mode::kBandwidth || c.bidir)) {
    return InvalidArgument(std::string(BenchOpName(c.op)) +
                           " is a one-direction bandwidth reference (ferry-bw without --bidir)");
  }
  if (c.op == BenchOp::kPackRead && c.depth > kMaxPackReadDepth) {
    return InvalidArgument("pack_read keeps at most " + std::to_string(kMaxPackReadDepth) +
                           " requests in flight per endpoint (--depth)");
  }
  if (c.timeout_ms == 0 || c.timeout_ms > 3600000) {
    return InvalidArgument("timeout must be in [1 ms, 1 h]");
  }
  if (UsesRows(c.op)) {
    if (c.rows == 0 || c.rows > (1u << 20)) return InvalidArgument("rows must be in [1, 2^20]");
    if (c.row_size < 2 || c.row_size > (1u << 24)) {
      return InvalidArgument("row size must be in [2, 16 MiB]");
    }
    if (c.region_size > (16ull << 30)) return InvalidArgument("region size above 16 GiB");
    // Two disjoint halves (latency) or partitions (bandwidth), each holding `rows` distinct rows.
    if (c.region_size / c.row_size < 2 * c.rows) {
      return InvalidArgument("region size " + std::to_string(c.region_size) +
                             " holds fewer than 2 * rows rows of " + std::to_string(c.row_size) +
                             " bytes; raise --region-size or lower --rows/--row-size");
    }
    if (c.rows * c.row_size > kMaxSize) return InvalidArgument("rows * row size above 1 GiB");
  }
  return Status::Ok();
}

std::vector<uint8_t> EncodeConfig(const BenchConfig& c) {
  nlohmann::json j = {
      {"mode", ModeName(c.mode)},
      {"op", BenchOpName(c.op)},
      {"sizes", c.sizes},
      {"iters", c.iters},
      {"duration_s", c.duration_s},
      {"warmup", c.warmup},
      {"depth", c.depth},
      {"bidir", c.bidir},
      {"endpoints", c.endpoints},
      {"threads", c.threads},
      {"check", CheckPolicyName(c.check)},
      {"rows", c.rows},
      {"row_size", c.row_size},
      {"region_size", c.region_size},
      {"seed", c.seed},
      {"timeout_ms", c.timeout_ms},
  };
  const std::string s = j.dump();
  return std::vector<uint8_t>(s.begin(), s.end());
}

Result<BenchConfig> DecodeConfig(std::span<const uint8_t> bytes) {
  if (bytes.size() > 65536) return ProtocolError("benchmark config larger than 64 KiB");
  const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return ProtocolError("benchmark config from the peer is not a JSON object");
  }
  BenchConfig c;
  // Typed getters throw on a type mismatch; catch here so nothing crosses the library boundary.
  try {
    const std::string mode = j.at("mode").get<std::string>();
    if (mode == "latency") {
      c.mode = Mode::kLatency;
    } else if (mode == "bandwidth") {
      c.mode = Mode::kBandwidth;
    } else {
      return ProtocolError("unknown mode '" + mode + "' in the peer's config");
    }
    FERRY_ASSIGN_OR_RETURN(c.op, ParseBenchOp(j.at("op").get<std::string>()));
    c.sizes = j.at("sizes").get<std::vector<uint64_t>>();
    if (c.sizes.size() > 4096) return ProtocolError("too many sizes in the peer's config");
    c.iters = j.at("iters").get<uint64_t>();
    c.duration_s = j.at("duration_s").get<double>();
    c.warmup = j.at("warmup").get<uint64_t>();
    c.depth = j.at("depth").get<uint32_t>();
    c.bidir = j.at("bidir").get<bool>();
    c.endpoints = j.at("endpoints").get<uint32_t>();
    c.threads = j.at("threads").get<uint32_t>();
    FERRY_ASSIGN_OR_RETURN(c.check, ParseCheckPolicy(j.at("check").get<std::string>()));
    c.rows = j.at("rows").get<uint64_t>();
    c.row_size = j.at("row_size").get<uint64_t>();
    c.region_size = j.at("region_size").get<uint64_t>();
    c.seed = j.at("seed").get<uint64_t>();
    c.timeout_ms = j.at("timeout_ms").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    return ProtocolError(std::string("malformed benchmark config from the peer: ") + e.what());
  }
  Status s = ValidateConfig(c);
  if (!s.ok()) return ProtocolError("peer's benchmark config rejected: " + s.message());
  return c;
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  const std::string original(text);
  uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) {
    return InvalidArgument("size '" + original + "' is not a number (e.g. 64, 4K, 1M)");
  }
  std::string unit(ptr, end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  uint64_t mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    mult = 1ull << 10;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    mult = 1ull << 20;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    mult = 1ull << 30;
  } else {
    return InvalidArgument("size '" + original + "' has an unknown unit (use K, M or G)");
  }
  if (value == 0) return InvalidArgument("size '" + original + "' must be positive");
  if (value > (1ull << 40) / mult) return InvalidArgument("size '" + original + "' is too large");
  return value * mult;
}

}  // namespace ferry::bench
