// ps_reference's measurements (see ps_reference.cc for what each one is and why): the table a
// server would hold, the gathers a pull does, the updates a push does, each over the batches
// ferry-ps-bench's worker 0 uses. Single-threaded unless said; nothing here is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ps/job/partition.h"
#include "ps/store/array_hash_map.h"
#include "tools/ps/keys.h"
#include "tools/ps/ps_bench.h"

namespace ferry::psbench {

// One measured loop: its timed iterations and per-iteration latencies.
struct RefResult {
  std::string op;  // gather, memcpy, adagrad (the optimizer's name)
  uint64_t iterations = 0;
  double seconds = 0;
  uint64_t keys = 0;
  uint64_t payload_bytes = 0;
  std::vector<double> usec;
};

// A measured loop's result named `op`, with its totals for o.iters timed batches of o.keys rows
// of o.dim floats; the loop fills in seconds and latencies.
inline RefResult StartResult(std::string op, const BenchOptions& o) {
  RefResult r;
  r.op = std::move(op);
  r.iterations = o.iters;
  r.keys = uint64_t{o.iters} * o.keys;
  r.payload_bytes = r.keys * o.dim * 4;
  return r;
}

// The batches worker 0 of ferry-ps-bench uses for `op` (tools/ps/keys.h, MeasureSeed): o.warmup
// untimed ones, then o.iters timed ones.
inline Result<KeyBatches> Worker0Batches(const BenchOptions& o, BenchOp op) {
  return KeyBatches::Create(o.key_spec, o.keys, MeasureSeed(o, 0, op),
                            uint64_t{o.warmup} + o.iters);
}

struct Table {
  std::unique_ptr<ps::ArrayHashMap> map;
  double populate_seconds = 0;
};

// reference_pull.cc
// The table of partition `part` of `parts` (every key when parts == 1), built and populated as a
// server's (the same row stride, initial rows, InitWeights / InitState).
Result<Table> BuildTable(const BenchOptions& o, const ps::Partition& partition, uint32_t part);
// gather: FindBatch + memcpy per batch. Leaves the last batch's rows in `dense` for the check.
Result<RefResult> Gather(const ps::ArrayHashMap& m, const BenchOptions& o,
                         std::vector<float>* dense, std::vector<uint64_t>* last_keys);
// memcpy: the same batches, slots resolved for all of them first.
Result<RefResult> MemcpyGather(const ps::ArrayHashMap& m, const BenchOptions& o);
// The untimed check: a gathered batch's rows equal ps::InitWeights of their keys.
Status CheckGathered(const BenchOptions& o, const std::vector<float>& dense,
                     const std::vector<uint64_t>& keys);

// reference_update.cc
// The optimizer applied in place, as a server applies a push (plain: the plain loops, no
// prefetch ahead).
Result<RefResult> Update(ps::ArrayHashMap& m, const BenchOptions& o, bool plain);
// The update with one thread per partition table (--threads), in step batch by batch.
Result<RefResult> ThreadedUpdate(std::vector<Table>& tables, const ps::Partition& partition,
                                 const BenchOptions& o);

}  // namespace ferry::psbench
