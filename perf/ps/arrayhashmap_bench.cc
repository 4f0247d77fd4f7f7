// ArrayHashMap against absl::flat_hash_map, tsl::robin_map and std::unordered_map, each storing
// the same W-byte rows under random 64-bit keys, in one run:
//   insert   - N inserts into an empty table (every growth included), ns per insert
//   find_hit - lookups of present keys (reading the row's first byte), ns per lookup
//   find_miss- lookups of absent keys, ns per lookup
//   gather   - 4096 random present keys -> what a pull needs to ship them: ArrayHashMap builds the
//              Segment list over its registered rows (zero copy); the others must pack the rows
//              into a contiguous send buffer; "ferry_pack" packs too, for a like-for-like copy
//   memory   - in a fresh child process: RSS per entry after N inserts, peak RSS during the
//              build relative to that steady state, and (ArrayHashMap) index bytes per key
//   insert_batch / find_batch - ArrayHashMap only: the same N inserts through InsertBatch and
//              the same lookups through FindBatch, in batches of 1024 keys (the server's paths)
// "ferry" grows its rows with mremap, "ferry_reserve" with mprotect inside a PROT_NONE
// reservation sized for N.
//
// Alternation: every timed cell runs --rounds times (default 3). A round runs each container's
// insert, finds and gather, one container after another, so the containers alternate round by
// round and a slow spell of a shared machine hits all of them. The tables show the median time
// and the median over rounds of the ratio to absl *in the same round*.
// --prefault-mib=M first touches and frees M MiB, so that no container is the first to make a
// virtual machine back fresh memory (which costs several ms per huge page here).
//
// Usage: ps_bench [--sizes=1000000,10000000] [--widths=8,64,256] [--min-time=0.2] [--rounds=3]
//                 [--prefault-mib=0] [--md=out.md] [--tsv=cells.tsv] [google-benchmark flags]
// Prints ratio tables (container time / absl time) after the run; --md writes them as Markdown.
#include <absl/container/flat_hash_map.h>
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <tsl/robin_map.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "perf/ps/bench_report.h"
#include "ps/store/array_hash_map.h"

namespace {

using ferry::ps::ArrayHashMap;

uint64_t Mix(uint64_t x) {  // splitmix64: a bijection, so distinct i give distinct keys
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t PresentKey(uint64_t i) {
  return Mix(i);
}
uint64_t AbsentKey(uint64_t i) {
  return Mix(i + (1ull << 62));
}

template <size_t W>
struct RowBytes {
  uint8_t b[W];
};

// ---- Adapters: the same four operations over each container ----

template <size_t W, class Map>
class StdLike {
 public:
  static constexpr size_t kWidth = W;
  explicit StdLike(size_t /*n*/) {}
  uint8_t* Insert(uint64_t k) {
    auto it = m_.try_emplace(k).first;
    if constexpr (requires { it.value(); }) {
      return it.value().b;  // tsl::robin_map: it->second is const
    } else {
      return it->second.b;
    }
  }
  const uint8_t* Find(uint64_t k) const {
    auto it = m_.find(k);
    return it == m_.end() ? nullptr : it->second.b;
  }
  size_t Gather(const std::vector<uint64_t>& keys, std::vector<uint8_t>* pack,
                std::vector<ferry::Segment>*) const {
    size_t n = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint8_t* p = Find(keys[i]);
      if (p) std::memcpy(pack->data() + i * W, p, W), ++n;
    }
    return n;
  }
  size_t index_bytes() const { return 0; }

 private:
  Map m_;
};

template <size_t W, ferry::ps::GrowthMode kMode, bool kPack>
class Ferry {
 public:
  static constexpr size_t kWidth = W;
  explicit Ferry(size_t n) {
    ferry::ps::TableOptions o;
    o.dim = static_cast<uint32_t>(W / 4);
    o.metadata = false;  // row = key + W bytes, like the others' (key, value) slots
    o.growth = kMode;
    o.initial_rows = 1024;
    o.reserve_rows = n + 1024;
    m_ = std::move(ArrayHashMap::Create(o).value());
  }
  uint8_t* Insert(uint64_t k) { return m_->Insert(k).value().row + 8; }
  const uint8_t* Find(uint64_t k) const {
    const uint8_t* r = m_->Find(k);
    return r ? r + 8 : nullptr;
  }
  size_t Gather(const std::vector<uint64_t>& keys, std::vector<uint8_t>* pack,
                std::vector<ferry::Segment>* segs) const {
    if constexpr (kPack) {
      size_t n = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        const uint8_t* p = Find(keys[i]);
        if (p) std::memcpy(pack->data() + i * W, p, W), ++n;
      }
      return n;
    } else {
      segs->clear();
      (void)m_->RowSegments(keys, ferry::ps::RowField::kValue, 0, W, segs, nullptr);
      return segs->size();
    }
  }
  size_t index_bytes() const { return m_->index_bytes(); }
  void InsertBatch(std::span<const uint64_t> keys, std::span<uint32_t> slots) {
    if (!m_->InsertBatch(keys, slots).ok()) std::abort();
    for (size_t i = 0; i < keys.size(); ++i) m_->Row(slots[i])[8] = static_cast<uint8_t>(keys[i]);
  }
  size_t FindBatch(std::span<const uint64_t> keys, std::span<uint32_t> slots) const {
    if (!m_->FindBatch(keys, slots).ok()) std::abort();
    size_t sum = 0;
    for (uint32_t s : slots) {
      if (s != ArrayHashMap::kNoSlot) sum += m_->Row(s)[8] + 1;
    }
    return sum;
  }

 private:
  std::unique_ptr<ArrayHashMap> m_;
};

template <size_t W>
using Absl = StdLike<W, absl::flat_hash_map<uint64_t, RowBytes<W>>>;
template <size_t W>
using Robin = StdLike<W, tsl::robin_map<uint64_t, RowBytes<W>>>;
template <size_t W>
using Std = StdLike<W, std::unordered_map<uint64_t, RowBytes<W>>>;
template <size_t W>
using FerryRemap = Ferry<W, ferry::ps::GrowthMode::kRemap, false>;
template <size_t W>
using FerryReserve = Ferry<W, ferry::ps::GrowthMode::kReserve, false>;
template <size_t W>
using FerryPack = Ferry<W, ferry::ps::GrowthMode::kRemap, true>;

// ---- The one built table kept between the benchmarks of a (container, N, W) group ----

std::shared_ptr<void> g_table;
std::string g_table_id;

template <class A>
std::shared_ptr<A> Build(size_t n) {
  auto a = std::make_shared<A>(n);
  for (size_t i = 0; i < n; ++i) a->Insert(PresentKey(i))[0] = static_cast<uint8_t>(i);
  return a;
}

template <class A>
std::shared_ptr<A> Cached(const std::string& id, size_t n) {
  if (g_table_id != id) {
    g_table.reset();  // free the previous group's table first
    g_table = Build<A>(n);
    g_table_id = id;
  }
  return std::static_pointer_cast<A>(g_table);
}

template <class A>
void BM_Insert(benchmark::State& state, std::string id, size_t n) {
  for (auto _ : state) {
    state.PauseTiming();  // freeing the previous group's table is not this insert's cost
    g_table.reset();
    g_table_id.clear();
    state.ResumeTiming();
    auto a = Build<A>(n);
    state.PauseTiming();
    g_table = a;
    g_table_id = id;
    state.counters["index_B_per_key"] =
        static_cast<double>(a->index_bytes()) / static_cast<double>(n);
    state.ResumeTiming();
  }
  state.counters["ops"] = static_cast<double>(n);
}

template <class A>
void BM_Find(benchmark::State& state, std::string id, size_t n, bool hit) {
  auto a = Cached<A>(id, n);
  constexpr size_t kBatch = 1 << 16;
  std::vector<uint64_t> keys(kBatch);
  uint64_t rng = 12345;
  for (auto& k : keys) {
    rng = Mix(rng);
    k = hit ? PresentKey(rng % n) : AbsentKey(rng % n);
  }
  uint64_t sum = 0;
  size_t found = 0;
  for (auto _ : state) {
    for (uint64_t k : keys) {
      const uint8_t* p = a->Find(k);
      if (p) sum += p[0], ++found;
    }
  }
  benchmark::DoNotOptimize(sum);
  if (found != (hit ? state.iterations() * kBatch : 0)) state.SkipWithError("wrong lookup result");
  state.counters["ops"] = static_cast<double>(state.iterations() * kBatch);
}

template <class A>
void BM_InsertBatch(benchmark::State& state, size_t n) {
  std::vector<uint64_t> keys(1024);
  std::vector<uint32_t> slots(keys.size());
  for (auto _ : state) {
    state.PauseTiming();
    g_table.reset();  // the group's table from its insert benchmark is rebuilt by its finds
    g_table_id.clear();
    state.ResumeTiming();
    auto a = std::make_unique<A>(n);
    for (size_t i = 0; i < n; i += keys.size()) {
      const size_t b = std::min(keys.size(), n - i);
      for (size_t j = 0; j < b; ++j) keys[j] = PresentKey(i + j);
      a->InsertBatch({keys.data(), b}, {slots.data(), b});
    }
    state.PauseTiming();  // freeing the table is not an insert's cost
    a.reset();
    state.ResumeTiming();
  }
  state.counters["ops"] = static_cast<double>(n);
}

template <class A>
void BM_FindBatch(benchmark::State& state, std::string id, size_t n) {
  auto a = Cached<A>(id, n);
  constexpr size_t kBatch = 1 << 16;
  std::vector<uint64_t> keys(kBatch);
  std::vector<uint32_t> slots(1024);
  uint64_t rng = 12345;  // the find_hit keys
  for (auto& k : keys) {
    rng = Mix(rng);
    k = PresentKey(rng % n);
  }
  size_t sum = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < kBatch; i += slots.size()) {
      sum += a->FindBatch({keys.data() + i, slots.size()}, slots);
    }
  }
  benchmark::DoNotOptimize(sum);
  if (sum < state.iterations() * kBatch) state.SkipWithError("FindBatch missed present keys");
  state.counters["ops"] = static_cast<double>(state.iterations() * kBatch);
}

template <class A>
void BM_Gather(benchmark::State& state, std::string id, size_t n) {
  auto a = Cached<A>(id, n);
  constexpr size_t kKeys = 4096;
  std::vector<uint64_t> keys(kKeys);
  std::vector<uint8_t> pack(kKeys * A::kWidth);
  std::vector<ferry::Segment> segs;
  segs.reserve(kKeys);
  uint64_t rng = 777;
  size_t got = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (auto& k : keys) {
      rng = Mix(rng);
      k = PresentKey(rng % n);
    }
    state.ResumeTiming();
    got = a->Gather(keys, &pack, &segs);
    benchmark::DoNotOptimize(pack.data());
    benchmark::DoNotOptimize(segs.data());
  }
  if (got == 0) state.SkipWithError("gather found nothing");
  state.counters["ops"] = static_cast<double>(state.iterations() * kKeys);
}

// ---- Memory: a fresh child process per measurement ----

struct MemSample {
  double base = 0, hwm = 0, rss = 0, index = 0;
};

double StatusKb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t len = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, len, field) == 0) return std::stod(line.substr(len + 1)) * 1024.0;
  }
  return 0;
}

template <class A>
int MemoryChild(size_t n) {
  { std::ofstream("/proc/self/clear_refs") << "5"; }  // reset VmHWM to the current RSS
  const double base = StatusKb("VmRSS");
  A a(n);
  for (size_t i = 0; i < n; ++i) a.Insert(PresentKey(i))[0] = static_cast<uint8_t>(i);
  std::printf("%.0f %.0f %.0f %zu\n", base, StatusKb("VmHWM"), StatusKb("VmRSS"), a.index_bytes());
  return 0;
}

std::string g_self;
double g_min_time = 0.2;  // seconds per timed benchmark (--min-time=)

template <class A>
void BM_Memory(benchmark::State& state, std::string kind, size_t n) {
  MemSample s;
  g_table.reset();  // the child's peak plus a kept table could exceed the machine's memory
  g_table_id.clear();
  for (auto _ : state) {
    const std::string cmd = g_self + " --memory-child=" + kind + "," + std::to_string(A::kWidth) +
                            "," + std::to_string(n);
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr || std::fscanf(p, "%lf %lf %lf %lf", &s.base, &s.hwm, &s.rss, &s.index) != 4) {
      if (p) pclose(p);
      state.SkipWithError("memory child failed");
      return;
    }
    pclose(p);
  }
  const double steady = s.rss - s.base;
  state.counters["B_per_entry"] = steady / static_cast<double>(n);
  state.counters["peak_ratio"] = (s.hwm - s.base) / steady;
  state.counters["index_B_per_key"] = s.index / static_cast<double>(n);
}

// ---- Registration ----

const char* const kKinds[] = {"ferry", "ferry_reserve", "ferry_pack", "absl", "robin", "std"};
int g_rounds = 3;

// One round of one container: "<op>/<kind>/<n>/<w>/<round>". The insert builds the table the
// round's finds and gather then use (Cached), so only one container's table is alive at a time.
template <size_t W, template <size_t> class A>
void RegisterOne(const std::string& kind, size_t n, int round) {
  const std::string tag = kind + "/" + std::to_string(n) + "/" + std::to_string(W);
  const std::string id = tag + "/" + std::to_string(round);
  constexpr bool kFerry = requires(A<W> a) {
    a.FindBatch({}, {});
  };
  if (kind != "ferry_pack") {
    if (round == 0) {
      benchmark::RegisterBenchmark(("memory/" + tag).c_str(), BM_Memory<A<W>>, kind, n)
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
    }
    if constexpr (kFerry) {
      if (kind == "ferry") {
        benchmark::RegisterBenchmark(("insert_batch/" + id).c_str(), BM_InsertBatch<A<W>>, n)
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
      }
    }
    benchmark::RegisterBenchmark(("insert/" + id).c_str(), BM_Insert<A<W>>, id, n)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("find_hit/" + id).c_str(), BM_Find<A<W>>, id, n, true)
        ->MinTime(g_min_time);
    if constexpr (kFerry) {
      if (kind == "ferry") {
        benchmark::RegisterBenchmark(("find_batch/" + id).c_str(), BM_FindBatch<A<W>>, id, n)
            ->MinTime(g_min_time);
      }
    }
    benchmark::RegisterBenchmark(("find_miss/" + id).c_str(), BM_Find<A<W>>, id, n, false)
        ->MinTime(g_min_time);
  }
  benchmark::RegisterBenchmark(("gather/" + id).c_str(), BM_Gather<A<W>>, id, n)
      ->MinTime(g_min_time);
}

template <size_t W>
void RegisterWidth(size_t n) {
  for (int round = 0; round < g_rounds; ++round) {
    RegisterOne<W, FerryRemap>("ferry", n, round);
    RegisterOne<W, FerryReserve>("ferry_reserve", n, round);
    RegisterOne<W, FerryPack>("ferry_pack", n, round);
    RegisterOne<W, Absl>("absl", n, round);
    RegisterOne<W, Robin>("robin", n, round);
    RegisterOne<W, Std>("std", n, round);
  }
}

template <size_t W>
int DispatchChild(const std::string& kind, size_t n) {
  if (kind == "ferry") return MemoryChild<FerryRemap<W>>(n);
  if (kind == "ferry_reserve") return MemoryChild<FerryReserve<W>>(n);
  if (kind == "absl") return MemoryChild<Absl<W>>(n);
  if (kind == "robin") return MemoryChild<Robin<W>>(n);
  if (kind == "std") return MemoryChild<Std<W>>(n);
  return 2;
}

// Touches and frees `mib` MiB: a VM backs guest memory on first touch, slowly; after this the
// containers all get memory the host already backs, whichever runs first.
void Prefault(size_t mib) {
  const size_t bytes = mib << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "prefault of %zu MiB failed; continuing without\n", mib);
    return;
  }
  for (size_t off = 0; off < bytes; off += 4096) static_cast<volatile char*>(p)[off] = 1;
  munmap(p, bytes);
}

std::vector<size_t> ParseList(const std::string& s) {
  std::vector<size_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) v.push_back(std::stoull(item));
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {1000000, 10000000};
  std::vector<size_t> widths = {8, 64, 256};
  std::string md;
  std::string tsv;
  size_t prefault_mib = 0;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--memory-child=", 0) == 0) {
      std::vector<std::string> parts;
      std::stringstream ss(a.substr(15));
      std::string item;
      while (std::getline(ss, item, ',')) parts.push_back(item);
      if (parts.size() != 3) return 2;
      const size_t w = std::stoull(parts[1]);
      const size_t n = std::stoull(parts[2]);
      if (w == 8) return DispatchChild<8>(parts[0], n);
      if (w == 64) return DispatchChild<64>(parts[0], n);
      if (w == 256) return DispatchChild<256>(parts[0], n);
      return 2;
    } else if (a.rfind("--sizes=", 0) == 0) {
      sizes = ParseList(a.substr(8));
    } else if (a.rfind("--widths=", 0) == 0) {
      widths = ParseList(a.substr(9));
    } else if (a.rfind("--min-time=", 0) == 0) {
      g_min_time = std::stod(a.substr(11));
    } else if (a.rfind("--rounds=", 0) == 0) {
      g_rounds = std::max(1, std::stoi(a.substr(9)));
    } else if (a.rfind("--prefault-mib=", 0) == 0) {
      prefault_mib = std::stoull(a.substr(15));
    } else if (a.rfind("--md=", 0) == 0) {
      md = a.substr(5);
    } else if (a.rfind("--tsv=", 0) == 0) {
      tsv = a.substr(6);
    } else {
      rest.push_back(argv[i]);
    }
  }
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::fprintf(stderr, "cannot resolve /proc/self/exe\n");
    return 1;
  }
  g_self.assign(self, static_cast<size_t>(len));
  if (prefault_mib > 0) Prefault(prefault_mib);
  for (size_t n : sizes) {
    for (size_t w : widths) {
      if (w == 8) {
        RegisterWidth<8>(n);
      } else if (w == 64) {
        RegisterWidth<64>(n);
      } else if (w == 256) {
        RegisterWidth<256>(n);
      } else {
        std::fprintf(stderr, "row width %zu not compiled in (8, 64, 256)\n", w);
        return 2;
      }
    }
  }
  int bargc = static_cast<int>(rest.size());
  benchmark::Initialize(&bargc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, rest.data())) return 2;
  ferry::perf::CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  const ferry::perf::ReportShape shape{
      sizes, widths, {std::begin(kKinds), std::end(kKinds)}, g_rounds};
  const std::string tables = ferry::perf::MarkdownTables(reporter, shape);
  std::printf("%s", tables.c_str());
  if (!md.empty()) {
    std::ofstream out(md);
    out << tables;
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", md.c_str());
      return 1;
    }
  }
  if (!tsv.empty()) {
    std::ofstream out(tsv);
    out << ferry::perf::CellsTsv(reporter, shape);
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", tsv.c_str());
      return 1;
    }
  }
  // A smoke run must fail loudly if any benchmark reported an error.
  return reporter.empty() ? 1 : 0;
}
