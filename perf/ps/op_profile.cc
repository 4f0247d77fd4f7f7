// op_profile: one ArrayHashMap (or absl::flat_hash_map) workload per process, split into phases
// that are separate non-inlined functions, so `valgrind --tool=callgrind` attributes
// instructions to each phase (inclusive cost of Phase*) and to the table code under it. Also
// prints CPU ns per operation per phase (a quick look; ps_bench is the measurement).
//
// Usage: op_profile N ROW_BYTES [ferry|absl] [LOOKUPS]
//   build     N inserts from empty (one at a time), every growth included
//   build_b   the same N keys through InsertBatch (ferry only; a second table)
//   find_hit  LOOKUPS (default 1M) random present keys, reading the row's first value byte
//   find_miss LOOKUPS random absent keys
//   find_b    FindBatch over the find_hit keys in batches of 1024 (ferry only)
// Keys are ps_bench's (splitmix64 of 0..N-1), so profiles and benchmark tables line up:
//   valgrind --tool=callgrind --callgrind-out-file=cg.out build-rel/perf/ps/op_profile 1000000 8
//   callgrind_annotate --inclusive=yes cg.out | grep -E 'Phase|HashIndex|ArrayHashMap'
#include <absl/container/flat_hash_map.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "ps/store/array_hash_map.h"

namespace {

using ferry::ps::ArrayHashMap;

uint64_t Mix(uint64_t x) {  // splitmix64, as in ps_bench
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::vector<uint64_t> LookupKeys(size_t n, size_t count, bool hit) {
  std::vector<uint64_t> keys(count);
  uint64_t rng = 12345;
  for (auto& k : keys) {
    rng = Mix(rng);
    k = hit ? Mix(rng % n) : Mix(rng % n + (1ull << 62));
  }
  return keys;
}

std::unique_ptr<ArrayHashMap> NewTable(size_t width) {
  ferry::ps::TableOptions o;
  o.dim = static_cast<uint32_t>(width / 4);
  o.metadata = false;
  return std::move(ArrayHashMap::Create(o).value());
}

__attribute__((noinline)) void PhaseBuild(ArrayHashMap& m, size_t n) {
  for (size_t i = 0; i < n; ++i) m.Insert(Mix(i)).value().row[8] = static_cast<uint8_t>(i);
}

__attribute__((noinline)) void PhaseBuildBatch(ArrayHashMap& m, size_t n) {
  std::vector<uint64_t> keys(1024);
  std::vector<uint32_t> slots(1024);
  for (size_t i = 0; i < n; i += keys.size()) {
    const size_t b = std::min(keys.size(), n - i);
    for (size_t j = 0; j < b; ++j) keys[j] = Mix(i + j);
    if (!m.InsertBatch({keys.data(), b}, {slots.data(), b}).ok()) std::abort();
  }
}

// kHit only names the instantiation, so that callgrind shows hits and misses apart.
template <bool kHit>
__attribute__((noinline)) size_t PhaseFind(const ArrayHashMap& m, const std::vector<uint64_t>& k) {
  size_t sum = 0;
  for (uint64_t key : k) {
    const uint8_t* r = m.Find(key);
    if (r != nullptr) sum += r[8] + 1;
  }
  return sum;
}

__attribute__((noinline)) size_t PhaseFindBatch(const ArrayHashMap& m,
                                                const std::vector<uint64_t>& k) {
  std::vector<uint32_t> slots(1024);
  size_t sum = 0;
  for (size_t i = 0; i < k.size(); i += slots.size()) {
    const size_t b = std::min(slots.size(), k.size() - i);
    if (!m.FindBatch({k.data() + i, b}, {slots.data(), b}).ok()) std::abort();
    for (size_t j = 0; j < b; ++j) {
      if (slots[j] != ArrayHashMap::kNoSlot) sum += m.Row(slots[j])[8] + 1;
    }
  }
  return sum;
}

template <size_t W>
struct Value {
  uint8_t b[W];
};

template <size_t W>
__attribute__((noinline)) void PhaseAbslBuild(absl::flat_hash_map<uint64_t, Value<W>>& m,
                                              size_t n) {
  for (size_t i = 0; i < n; ++i) m[Mix(i)].b[0] = static_cast<uint8_t>(i);
}

template <size_t W, bool kHit>
__attribute__((noinline)) size_t PhaseAbslFind(const absl::flat_hash_map<uint64_t, Value<W>>& m,
                                               const std::vector<uint64_t>& k) {
  size_t sum = 0;
  for (uint64_t key : k) {
    auto it = m.find(key);
    if (it != m.end()) sum += it->second.b[0] + 1;
  }
  return sum;
}

void Report(const char* phase, double seconds, size_t ops, size_t check) {
  std::printf("%-10s %8.1f ns/op  (check %zu)\n", phase, seconds * 1e9 / static_cast<double>(ops),
              check);
}

template <size_t W>
int RunAbsl(size_t n, size_t lookups) {
  absl::flat_hash_map<uint64_t, Value<W>> m;
  double t = CpuSeconds();
  PhaseAbslBuild<W>(m, n);
  Report("build", CpuSeconds() - t, n, m.size());
  for (bool hit : {true, false}) {
    const std::vector<uint64_t> keys = LookupKeys(n, lookups, hit);
    t = CpuSeconds();
    const size_t sum = hit ? PhaseAbslFind<W, true>(m, keys) : PhaseAbslFind<W, false>(m, keys);
    Report(hit ? "find_hit" : "find_miss", CpuSeconds() - t, lookups, sum);
  }
  return 0;
}

int RunFerry(size_t n, size_t width, size_t lookups) {
  std::unique_ptr<ArrayHashMap> m = NewTable(width);
  double t = CpuSeconds();
  PhaseBuild(*m, n);
  Report("build", CpuSeconds() - t, n, m->size());
  {
    std::unique_ptr<ArrayHashMap> b = NewTable(width);
    t = CpuSeconds();
    PhaseBuildBatch(*b, n);
    Report("build_b", CpuSeconds() - t, n, b->size());
  }
  for (bool hit : {true, false}) {
    const std::vector<uint64_t> keys = LookupKeys(n, lookups, hit);
    t = CpuSeconds();
    const size_t sum = hit ? PhaseFind<true>(*m, keys) : PhaseFind<false>(*m, keys);
    Report(hit ? "find_hit" : "find_miss", CpuSeconds() - t, lookups, sum);
    if (hit) {
      t = CpuSeconds();
      const size_t bsum = PhaseFindBatch(*m, keys);
      Report("find_b", CpuSeconds() - t, lookups, bsum);
      if (bsum != sum) return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: op_profile N ROW_BYTES [ferry|absl] [LOOKUPS]\n");
    return 2;
  }
  const size_t n = std::strtoull(argv[1], nullptr, 10);
  const size_t width = std::strtoull(argv[2], nullptr, 10);
  const std::string kind = argc > 3 ? argv[3] : "ferry";
  const size_t lookups = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 1000000;
  if (n == 0 || lookups == 0) return 2;
  if (kind == "ferry") {
    if (width == 0 || width % 4 != 0) return 2;
    return RunFerry(n, width, lookups);
  }
  if (width == 8) return RunAbsl<8>(n, lookups);
  if (width == 64) return RunAbsl<64>(n, lookups);
  std::fprintf(stderr, "absl: ROW_BYTES must be 8 or 64\n");
  return 2;
}
