// ps_reference's pull side: the server-shaped table and the gathers (reference.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "perf/psbench/reference.h"
#include "ps/store/optimizer.h"
#include "tools/bench/stats.h"
#include "tools/ps/pipeline.h"

namespace ferry::psbench {
namespace {

Status CheckMissing(std::span<const uint32_t> slots) {
  for (uint32_t s : slots) {
    if (s == ps::ArrayHashMap::kNoSlot) return Internal("a batch key is missing from the table");
  }
  return Status::Ok();
}

}  // namespace

// The table of partition `part` of `parts` (every key when parts == 1).
Result<Table> BuildTable(const BenchOptions& o, const ps::Partition& partition, uint32_t part) {
  const uint32_t parts = partition.servers();
  ps::TableOptions to;
  to.dim = o.dim;
  to.state_floats = ps::StateFloats(o.optimizer, o.dim);
  to.metadata = true;
  to.initial_rows = std::max<size_t>(TableInitialRows(o) / parts, 64);
  Table t;
  FERRY_ASSIGN_OR_RETURN(t.map, ps::ArrayHashMap::Create(to));
  ps::ArrayHashMap& m = *t.map;
  if (m.layout().stride != ServerRowStride(o)) {
    return Internal("reference row stride " + std::to_string(m.layout().stride) +
                    " differs from a server's " + std::to_string(ServerRowStride(o)));
  }
  ps::InitializerSpec init = BuildJob(o).tables[0].init;
  const uint64_t chunk = PopulateChunk(o);
  std::vector<uint64_t> keys(chunk);
  std::vector<uint32_t> slots(chunk);
  const SteadyClock::time_point start = SteadyClock::now();
  for (uint64_t b = 0; b < o.key_spec.space; b += chunk) {
    uint64_t n = 0;
    for (uint64_t i = b; i < std::min(b + chunk, o.key_spec.space); ++i) {
      if (parts == 1 || partition.ServerOf(KeyOf(i)) == part) keys[n++] = KeyOf(i);
    }
    FERRY_RETURN_IF_ERROR(m.InsertBatch(std::span<const uint64_t>(keys.data(), n),
                                        std::span<uint32_t>(slots.data(), n)));
    for (uint64_t i = 0; i < n; ++i) {
      uint8_t* row = m.Row(slots[i]);
      ps::InitWeights(init, keys[i], o.dim, m.Embedding(row));
      ps::InitState(o.optimizer, o.dim, m.State(row));
    }
  }
  t.populate_seconds = MicrosBetween(start, SteadyClock::now()) / 1e6;
  return t;
}

// gather: FindBatch + memcpy per batch. Leaves the last batch's rows in `dense` for the check.
Result<RefResult> Gather(const ps::ArrayHashMap& m, const BenchOptions& o,
                         std::vector<float>* dense, std::vector<uint64_t>* last_keys) {
  RefResult r = StartResult("gather", o);
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(KeyBatches batches, Worker0Batches(o, BenchOp::kPull));
  std::vector<uint32_t> slots(o.keys);
  dense->assign(size_t{o.keys} * o.dim, 0.0f);
  const size_t row = size_t{o.dim} * 4;
  const uint32_t off = m.layout().embedding_offset;
  SteadyClock::time_point t0 = SteadyClock::now();
  for (uint64_t it = 0; it < total; ++it) {
    const std::span<const uint64_t> keys = batches.Next();
    if (it == o.warmup) t0 = SteadyClock::now();
    const SteadyClock::time_point a = SteadyClock::now();
    FERRY_RETURN_IF_ERROR(m.FindBatch(keys, slots));
    float* out = dense->data();
    uint32_t missing = 0;
    for (uint32_t i = 0; i < o.keys; ++i) {
      // The server skips absent keys the same way (ReplyRows); here none may be absent.
      if (slots[i] == ps::ArrayHashMap::kNoSlot) {
        ++missing;
        continue;
      }
      std::memcpy(out + size_t{i} * o.dim, m.Row(slots[i]) + off, row);
    }
    const SteadyClock::time_point b = SteadyClock::now();
    if (missing != 0) return Internal(std::to_string(missing) + " batch keys are missing");
    if (it >= o.warmup) r.usec.push_back(MicrosBetween(a, b));
    if (it + 1 == total) {
      last_keys->assign(keys.begin(), keys.end());
      r.seconds = MicrosBetween(t0, b) / 1e6;
    }
  }
  return r;
}

// memcpy: the same batches, slots resolved for all of them first.
Result<RefResult> MemcpyGather(const ps::ArrayHashMap& m, const BenchOptions& o) {
  RefResult r = StartResult("memcpy", o);
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(KeyBatches batches, Worker0Batches(o, BenchOp::kPull));
  std::vector<uint32_t> slots(total * o.keys);
  for (uint64_t it = 0; it < total; ++it) {
    std::span<uint32_t> s(slots.data() + it * o.keys, o.keys);
    FERRY_RETURN_IF_ERROR(m.FindBatch(batches.Next(), s));
    FERRY_RETURN_IF_ERROR(CheckMissing(s));
  }
  std::vector<float> dense(size_t{o.keys} * o.dim);
  const size_t row = size_t{o.dim} * 4;
  const uint32_t off = m.layout().embedding_offset;
  SteadyClock::time_point t0 = SteadyClock::now(), b = t0;
  float sum = 0;
  for (uint64_t it = 0; it < total; ++it) {
    if (it == o.warmup) t0 = SteadyClock::now();
    const uint32_t* s = slots.data() + it * o.keys;
    const SteadyClock::time_point a = SteadyClock::now();
    for (uint32_t i = 0; i < o.keys; ++i) {
      std::memcpy(dense.data() + size_t{i} * o.dim, m.Row(s[i]) + off, row);
    }
    b = SteadyClock::now();
    if (it >= o.warmup) r.usec.push_back(MicrosBetween(a, b));
    sum += dense[it % dense.size()];  // the copies are used
  }
  if (!std::isfinite(sum)) return Internal("gathered rows are not finite");
  r.seconds = MicrosBetween(t0, b) / 1e6;
  return r;
}

Status CheckGathered(const BenchOptions& o, const std::vector<float>& dense,
                     const std::vector<uint64_t>& keys) {
  const ps::InitializerSpec init = BuildJob(o).tables[0].init;
  std::vector<float> want(o.dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    ps::InitWeights(init, keys[i], o.dim, want.data());
    if (std::memcmp(want.data(), dense.data() + i * o.dim, size_t{o.dim} * 4) != 0) {
      return Status(Code::kProtocol,
                    "gathered row of key " + std::to_string(keys[i]) + " differs from InitWeights");
    }
  }
  return Status::Ok();
}

}  // namespace ferry::psbench
