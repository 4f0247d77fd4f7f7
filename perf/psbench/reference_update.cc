// ps_reference's push side: the optimizer applied as a server applies a push (reference.h).
#include <algorithm>
#include <barrier>
#include <thread>

#include "perf/psbench/reference.h"
#include "ps/store/optimizer.h"
#include "tools/bench/stats.h"
#include "tools/ps/pipeline.h"

namespace ferry::psbench {
namespace {

// One batch's update on `m`, as a server applies a push: in blocks of ps::kApplyBlock keys
// (rows still cached), FindBatch + MarkUpdated + the optimizer, the rows kApplyAhead keys on
// prefetched whole. plain: the update as first written, for comparison: one coordinate at a time
// (ps::ApplyUpdateScalar) and no rows prefetched ahead.
Status ApplyBatch(ps::ArrayHashMap& m, const BenchOptions& o, std::span<const uint64_t> keys,
                  const float* grads, bool plain, std::vector<uint32_t>* slots) {
  const uint32_t n = static_cast<uint32_t>(keys.size());
  slots->resize(std::min<uint32_t>(n, ps::kApplyBlock));
  const auto apply = plain ? ps::ApplyUpdateScalar : ps::ApplyUpdate;
  for (uint32_t i = 0; i < n; ++i) {
    if (i % ps::kApplyBlock == 0) {
      const uint32_t len = std::min<uint32_t>(ps::kApplyBlock, n - i);
      FERRY_RETURN_IF_ERROR(m.FindBatch(keys.subspan(i, len), std::span(slots->data(), len)));
    }
    const uint32_t block_end = std::min(ps::kApplyBlock, n - i / ps::kApplyBlock * ps::kApplyBlock);
    const uint32_t ahead = i % ps::kApplyBlock + ps::kApplyAhead;
    if (!plain && ahead < block_end && (*slots)[ahead] != ps::ArrayHashMap::kNoSlot) {
      m.PrefetchRowForUpdate((*slots)[ahead]);
    }
    const uint32_t slot = (*slots)[i % ps::kApplyBlock];
    if (slot == ps::ArrayHashMap::kNoSlot) continue;  // as the server skips refused keys
    uint8_t* row = m.Row(slot);
    ps::ArrayHashMap::MarkUpdated(row);
    apply(o.optimizer, o.dim, m.Embedding(row), m.State(row), grads + size_t{i} * o.dim,
          ps::ArrayHashMap::Meta(row)->update_count);
  }
  return Status::Ok();
}

}  // namespace

// The optimizer applied in place, as a server applies a push.
Result<RefResult> Update(ps::ArrayHashMap& m, const BenchOptions& o, bool plain) {
  RefResult r =
      StartResult(std::string(ps::OptimizerName(o.optimizer.kind)) + (plain ? "-plain" : ""), o);
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(KeyBatches batches, Worker0Batches(o, BenchOp::kPush));
  const std::vector<float> grads = TimedGradients(o.keys, o.dim);
  std::vector<uint32_t> slots;
  SteadyClock::time_point t0 = SteadyClock::now(), b = t0;
  for (uint64_t it = 0; it < total; ++it) {
    const std::span<const uint64_t> keys = batches.Next();
    if (it == o.warmup) t0 = SteadyClock::now();
    const SteadyClock::time_point a = SteadyClock::now();
    FERRY_RETURN_IF_ERROR(ApplyBatch(m, o, keys, grads.data(), plain, &slots));
    b = SteadyClock::now();
    if (it >= o.warmup) r.usec.push_back(MicrosBetween(a, b));
  }
  r.seconds = MicrosBetween(t0, b) / 1e6;
  return r;
}

// The update with one thread per partition table (--threads): the same batches, each split by
// owner up front; per batch every thread applies its share to its own table, and the batch
// ends when the last one is done.
Result<RefResult> ThreadedUpdate(std::vector<Table>& tables, const ps::Partition& partition,
                                 const BenchOptions& o) {
  const uint32_t parts = static_cast<uint32_t>(tables.size());
  RefResult r = StartResult(
      std::string(ps::OptimizerName(o.optimizer.kind)) + "-x" + std::to_string(parts), o);
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(KeyBatches batches, Worker0Batches(o, BenchOp::kPush));
  // share[it][p]: batch it's keys owned by partition p (a worker's split, untimed).
  std::vector<std::vector<std::vector<uint64_t>>> share(total,
                                                        std::vector<std::vector<uint64_t>>(parts));
  for (uint64_t it = 0; it < total; ++it) {
    for (uint64_t k : batches.Next()) share[it][partition.ServerOf(k)].push_back(k);
  }
  const std::vector<float> grads = TimedGradients(o.keys, o.dim);
  std::vector<SteadyClock::time_point> ends(total);
  std::vector<Status> status(parts);
  std::barrier step(static_cast<std::ptrdiff_t>(parts),
                    [&, it = uint64_t{0}]() mutable noexcept { ends[it++] = SteadyClock::now(); });
  const SteadyClock::time_point start = SteadyClock::now();
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < parts; ++p) {
    threads.emplace_back([&, p] {
      std::vector<uint32_t> slots;
      for (uint64_t it = 0; it < total; ++it) {
        if (status[p].ok()) {
          status[p] = ApplyBatch(*tables[p].map, o, share[it][p], grads.data(), false, &slots);
        }
        step.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& st : status) FERRY_RETURN_IF_ERROR(st);
  for (uint64_t it = o.warmup; it < total; ++it) {
    r.usec.push_back(MicrosBetween(it == 0 ? start : ends[it - 1], ends[it]));
  }
  r.seconds = MicrosBetween(o.warmup == 0 ? start : ends[o.warmup - 1], ends[total - 1]) / 1e6;
  return r;
}

}  // namespace ferry::psbench
