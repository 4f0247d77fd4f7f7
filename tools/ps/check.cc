// The checked pass (untimed): every row it pulls is compared with what this process computes
// with the server's own functions.
//
//   A. pull       batches of the run's key distribution; nothing has been pushed yet, so every
//                 row must equal ps::InitWeights(table init, key).
//   -- barrier: every worker's pulls are done before anyone pushes --
//   B. push       keys of a batch that this worker owns for pushes (Owner(key) == w, of 2W
//                 classes: no other worker pushes them), one gradient row per occurrence
//                 (GradientOf); then a pull of them must give init + ONE update with the
//                 occurrences summed in order (what Worker::Push aggregates, what the server's
//                 ApplyUpdate does with update count 1).
//   C. push-pull  keys of class W + w, likewise; the rows the push-pull returns are the updated
//                 ones.
// The float arithmetic is the same code in the same order on both sides, so rows must agree to
// the last bit; a 1e-6 relative tolerance keeps the check independent of that detail anyway.
// Wire options: with --fp16-pull rows arrive as halves and must equal the expected weights
// rounded to half (the server's mirror is FloatToHalf of the row); with --fp16-push the server
// applies the summed gradient rounded to half; with --push-filter a key whose summed gradient has
// no |g| >= the threshold is dropped, so its row must still be the initial one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "tools/ps/ps_bench.h"

namespace ferry::psbench {
namespace {

constexpr uint32_t kPhaseCheck = 8;  // BatchSeed phases 8..10

uint32_t Owner(uint64_t key, uint32_t classes) {
  return static_cast<uint32_t>(KeyOf(key ^ 0x5bd1e9955bd1e995ull) % classes);
}

bool Near(float got, float want) {
  return std::fabs(got - want) <= 1e-6f * std::max(1.0f, std::max(std::fabs(got), std::fabs(want)));
}

Status CompareRow(const char* what, uint64_t key, const float* got, const float* want,
                  uint32_t dim) {
  for (uint32_t d = 0; d < dim; ++d) {
    if (!Near(got[d], want[d])) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: key %llu coordinate %u is %.9g, expected %.9g", what,
                    static_cast<unsigned long long>(key), d, static_cast<double>(got[d]),
                    static_cast<double>(want[d]));
      return Status(Code::kProtocol, std::string("verification failed: ") + buf);
    }
  }
  return Status::Ok();
}

// Row i of a pull, compared with `want` (floats) in the pull's wire format.
Status CompareRow(const char* what, uint64_t key, const ps::PulledRows& rows, size_t i,
                  const float* want, uint32_t dim) {
  if (!rows.fp16()) return CompareRow(what, key, rows[i], want, dim);
  std::vector<float> got(dim), halved(dim);
  for (uint32_t d = 0; d < dim; ++d) {
    got[d] = ps::HalfToFloat(rows.half(i)[d]);
    halved[d] = ps::HalfToFloat(ps::FloatToHalf(want[d]));
  }
  return CompareRow(what, key, got.data(), halved.data(), dim);
}

// The row the server must hold after one push of `grads_sum` onto a fresh row of `key`.
void ExpectedAfterPush(const ps::TableSpec& t, const BenchOptions& o, uint64_t key,
                       const float* grads_sum, float* w, std::vector<float>& state) {
  ps::InitWeights(t.init, key, t.dim, w);
  bool significant = o.push_filter <= 0.0f;
  for (uint32_t d = 0; d < t.dim && !significant; ++d) {
    significant = std::fabs(grads_sum[d]) >= o.push_filter;
  }
  if (!significant) return;  // the worker dropped it
  std::vector<float> g(grads_sum, grads_sum + t.dim);
  if (o.fp16_push) {
    for (float& v : g) v = ps::HalfToFloat(ps::FloatToHalf(v));
  }
  state.assign(ps::StateFloats(t.optimizer, t.dim), 0.0f);
  ps::InitState(t.optimizer, t.dim, state.data());
  ps::ApplyUpdate(t.optimizer, t.dim, w, state.data(), g.data(), /*step=*/1);
}

// B and C: push (or push-pull) the owned keys of `batch`, then verify.
Status CheckPushes(ps::Worker& w, uint32_t table, const BenchOptions& o, bool push_pull,
                   std::span<const uint64_t> batch, uint64_t* rows_checked) {
  const ps::TableSpec& t = w.job().tables[table];
  const uint32_t dim = t.dim;
  const uint32_t classes = 2 * o.workers;
  const uint32_t mine = (push_pull ? o.workers : 0) + w.index();
  std::vector<uint64_t> keys;
  for (uint64_t k : batch) {
    if (Owner(k, classes) == mine) keys.push_back(k);
  }
  if (keys.empty()) return Status::Ok();
  std::vector<float> grads(keys.size() * dim);
  // Sums in occurrence order, from zero, as Worker::AggregateGrads adds them.
  std::unordered_map<uint64_t, std::vector<float>> sum;
  std::vector<uint64_t> unique;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = sum.try_emplace(keys[i], std::vector<float>(dim, 0.0f));
    if (fresh) unique.push_back(keys[i]);
    for (uint32_t d = 0; d < dim; ++d) {
      grads[i * dim + d] = GradientOf(keys[i], d);
      it->second[d] += grads[i * dim + d];
    }
  }
  const ps::Millis limit = std::max(ps::Millis(120000), o.timeout * 4);
  ps::PullOptions po;
  po.fp16 = o.fp16_pull;
  std::vector<float> want(dim), state;
  if (push_pull) {
    FERRY_ASSIGN_OR_RETURN(ps::Ticket pp, w.PushPull(table, keys, grads, po));
    Status s = w.Wait(pp, limit);
    if (!s.ok()) {
      w.Release(pp);
      return s.Annotate("push-pull");
    }
    auto rows = w.Rows(pp);
    if (!rows.ok()) {
      w.Release(pp);
      return rows.status();
    }
    for (size_t i = 0; i < keys.size() && s.ok(); ++i) {
      ExpectedAfterPush(t, o, keys[i], sum[keys[i]].data(), want.data(), state);
      s = CompareRow("push-pull returned a wrong row", keys[i], *rows, i, want.data(), dim);
    }
    w.Release(pp);
    *rows_checked += keys.size();
    return s;
  }
  FERRY_ASSIGN_OR_RETURN(ps::Ticket push, w.Push(table, keys, grads));
  Status s = w.Wait(push, limit);  // acknowledged = applied (ASP)
  w.Release(push);
  if (!s.ok()) return s.Annotate("push");
  po.keys_unique = true;
  po.one_sided = o.one_sided;
  FERRY_ASSIGN_OR_RETURN(ps::Ticket pull, w.Pull(table, unique, po));
  s = w.Wait(pull, limit);
  if (!s.ok()) {
    w.Release(pull);
    return s.Annotate("pull after push");
  }
  auto rows = w.Rows(pull);
  if (!rows.ok()) {
    w.Release(pull);
    return rows.status();
  }
  for (size_t i = 0; i < unique.size() && s.ok(); ++i) {
    ExpectedAfterPush(t, o, unique[i], sum[unique[i]].data(), want.data(), state);
    s = CompareRow("a pushed row reads back wrong", unique[i], *rows, i, want.data(), dim);
  }
  w.Release(pull);
  *rows_checked += unique.size();
  return s;
}

}  // namespace

Status RunCheck(ps::Worker& w, uint32_t table, const BenchOptions& o, uint64_t* rows_checked) {
  const ps::TableSpec& t = w.job().tables[table];
  const ps::Millis limit = std::max(ps::Millis(120000), o.timeout * 4);
  ps::PullOptions po;
  po.keys_unique = KeysUniqueHint(o);
  po.one_sided = o.one_sided;  // one-sided rows are checked like the others
  po.fp16 = o.fp16_pull;
  std::vector<float> want(t.dim);
  // A: two batches of pulls against the initializer.
  FERRY_ASSIGN_OR_RETURN(
      KeyBatches pulls,
      KeyBatches::Create(o.key_spec, CheckBatch(o), BatchSeed(o.seed, w.index(), kPhaseCheck), 2));
  for (int b = 0; b < 2; ++b) {
    const std::span<const uint64_t> keys = pulls.Next();
    FERRY_ASSIGN_OR_RETURN(ps::Ticket p, w.Pull(table, keys, po));
    Status s = w.Wait(p, limit);
    if (s.ok()) {
      auto rows = w.Rows(p);
      s = rows.status();
      for (size_t i = 0; i < keys.size() && s.ok(); ++i) {
        ps::InitWeights(t.init, keys[i], t.dim, want.data());
        s = CompareRow("a pulled row differs from the initializer", keys[i], *rows, i, want.data(),
                       t.dim);
      }
    }
    w.Release(p);
    if (!s.ok()) return s;
    *rows_checked += keys.size();
  }
  FERRY_RETURN_IF_ERROR(w.Barrier());
  // B and C on batches of their own.
  FERRY_ASSIGN_OR_RETURN(KeyBatches pushes,
                         KeyBatches::Create(o.key_spec, CheckBatch(o),
                                            BatchSeed(o.seed, w.index(), kPhaseCheck + 1), 1));
  FERRY_RETURN_IF_ERROR(CheckPushes(w, table, o, /*push_pull=*/false, pushes.Next(), rows_checked));
  if (o.push_filter > 0) return Status::Ok();  // no filtered push-pulls (ps/job/job.h)
  FERRY_ASSIGN_OR_RETURN(KeyBatches pushpulls,
                         KeyBatches::Create(o.key_spec, CheckBatch(o),
                                            BatchSeed(o.seed, w.index(), kPhaseCheck + 2), 1));
  return CheckPushes(w, table, o, /*push_pull=*/true, pushpulls.Next(), rows_checked);
}

}  // namespace ferry::psbench
