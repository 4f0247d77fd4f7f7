// growth_profile: where an ArrayHashMap build's time goes, without hardware counters (this VM
// has none). Inserts N keys (the ps_bench key sequence) and times every Insert call; a call
// during which the rows buffer grew (growths() changed) or the index was rebuilt (it had no
// room left) is attributed to that growth, with its minor page faults
// (getrusage). Everything else is "steady" insertion, whose faults are first touches of rows and
// index pages. At the end it prints AnonHugePages of the rows and index mappings
// (/proc/self/smaps).
//
// Usage: growth_profile N ROW_BYTES [remap|reserve] [nohuge] [batch]
// `batch` inserts through InsertBatch in batches of 1024 keys (growth calls are then not split
// out).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ps/store/array_hash_map.h"

namespace {

uint64_t Mix(uint64_t x) {  // same keys as ps_bench (splitmix64)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// AnonHugePages (kB) of the mapping that contains `p`.
long HugeKbAt(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool in = false;
  while (std::getline(smaps, line)) {
    // A mapping's header line starts with "lo-hi " in hex; field lines start with a name.
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find_first_not_of("0123456789abcdef-") == space) {
      const unsigned long lo = std::strtoul(line.c_str(), nullptr, 16);
      const unsigned long hi = std::strtoul(line.c_str() + dash + 1, nullptr, 16);
      in = addr >= lo && addr < hi;
    } else if (in && line.rfind("AnonHugePages:", 0) == 0) {
      return std::strtol(line.c_str() + 14, nullptr, 10);
    }
  }
  return -1;
}

// System-wide THP and compaction counters from /proc/vmstat (deltas over a run are mostly
// ours on a quiet machine; other processes can add to them).
struct VmStat {
  long thp_fault_alloc = 0, thp_fault_fallback = 0, compact_stall = 0, thp_split_pmd = 0;
};
VmStat ReadVmStat() {
  VmStat v;
  std::ifstream f("/proc/vmstat");
  std::string name;
  long value = 0;
  while (f >> name >> value) {
    if (name == "thp_fault_alloc") v.thp_fault_alloc = value;
    if (name == "thp_fault_fallback") v.thp_fault_fallback = value;
    if (name == "compact_stall") v.compact_stall = value;
    if (name == "thp_split_pmd") v.thp_split_pmd = value;
  }
  return v;
}

double Seconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
}

struct Bucket {
  double seconds = 0;
  long faults = 0;
  long calls = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N ROW_BYTES [remap|reserve] [nohuge] [batch]\n", argv[0]);
    return 2;
  }
  const size_t n = std::strtoull(argv[1], nullptr, 10);
  const size_t width = std::strtoull(argv[2], nullptr, 10);
  ferry::ps::TableOptions o;
  o.dim = static_cast<uint32_t>(width / 4);
  o.metadata = false;
  o.growth = (argc > 3 && std::strcmp(argv[3], "reserve") == 0) ? ferry::ps::GrowthMode::kReserve
                                                                : ferry::ps::GrowthMode::kRemap;
  o.reserve_rows = n + 1024;
  bool batch = false;
  for (int a = 4; a < argc; ++a) {
    if (std::strcmp(argv[a], "nohuge") == 0) o.huge_pages = false;
    if (std::strcmp(argv[a], "batch") == 0) batch = true;
  }
  auto made = ferry::ps::ArrayHashMap::Create(o);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 1;
  }
  auto m = std::move(made).value();
  Bucket steady, rows_growth, index_growth;
  const VmStat vm0 = ReadVmStat();
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);
  const double t_start = CpuSeconds();
  const long f_start = MinorFaults();
  std::vector<uint64_t> keys;
  std::vector<uint32_t> slots;
  for (size_t i = 0; batch && i < n; i += keys.size()) {
    keys.resize(std::min<size_t>(1024, n - i));
    slots.resize(keys.size());
    for (size_t j = 0; j < keys.size(); ++j) keys[j] = Mix(i + j);
    const ferry::Status s = m->InsertBatch(keys, slots);
    if (!s.ok()) {
      std::fprintf(stderr, "batch at %zu: %s\n", i, s.ToString().c_str());
      return 1;
    }
    for (size_t j = 0; j < keys.size(); ++j) m->Row(slots[j])[8] = static_cast<uint8_t>(i + j);
  }
  for (size_t i = 0; !batch && i < n; ++i) {
    // Only an insert that will grow something is instrumented (getrusage and the CPU clock are
    // system calls, too costly per insert); steady time is the total minus the growth calls.
    Bucket* b = nullptr;
    if (m->free_slots() == 0 && m->high_water() == m->capacity()) {
      b = &rows_growth;
    } else if (m->index().growth_left() == 0) {
      b = &index_growth;
    }
    long f0 = 0;
    double t0 = 0;
    if (b != nullptr) {
      f0 = MinorFaults();
      t0 = CpuSeconds();
    }
    auto r = m->Insert(Mix(i));
    if (!r.ok()) {
      std::fprintf(stderr, "insert %zu: %s\n", i, r.status().ToString().c_str());
      return 1;
    }
    r->row[8] = static_cast<uint8_t>(i);
    if (b != nullptr) {
      b->seconds += CpuSeconds() - t0;
      b->faults += MinorFaults() - f0;
      ++b->calls;
    }
  }
  const double cpu = CpuSeconds() - t_start;
  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  const VmStat vm1 = ReadVmStat();
  const long faults = MinorFaults() - f_start;
  steady.faults = faults - rows_growth.faults - index_growth.faults;
  steady.seconds = cpu - rows_growth.seconds - index_growth.seconds;
  steady.calls = static_cast<long>(n) - rows_growth.calls - index_growth.calls;
  std::printf(
      "n=%zu row=%zuB mode=%s huge=%d%s: cpu %.1f ns/insert, %ld minor faults (%.3f/insert)\n", n,
      width, o.growth == ferry::ps::GrowthMode::kRemap ? "remap" : "reserve", o.huge_pages ? 1 : 0,
      batch ? " batch" : "", cpu * 1e9 / static_cast<double>(n), faults,
      static_cast<double>(faults) / static_cast<double>(n));
  std::printf(
      "  user %.2f s, sys %.2f s; vmstat deltas: thp_fault_alloc %ld, thp_fault_fallback %ld, "
      "compact_stall %ld, thp_split_pmd %ld\n",
      Seconds(ru1.ru_utime) - Seconds(ru0.ru_utime), Seconds(ru1.ru_stime) - Seconds(ru0.ru_stime),
      vm1.thp_fault_alloc - vm0.thp_fault_alloc, vm1.thp_fault_fallback - vm0.thp_fault_fallback,
      vm1.compact_stall - vm0.compact_stall, vm1.thp_split_pmd - vm0.thp_split_pmd);
  const auto show = [n](const char* name, const Bucket& b) {
    std::printf(
        "  %-13s calls %9ld  cpu %8.1f ms  (%6.1f ns per insert of the build)  faults %ld\n", name,
        b.calls, b.seconds * 1e3, b.seconds * 1e9 / static_cast<double>(n), b.faults);
  };
  show("steady", steady);
  show("rows growth", rows_growth);
  show("index growth", index_growth);
  std::printf("  rows %zu MiB (%ld MiB huge), index %zu MiB (%ld MiB huge), %.1f B/key index\n",
              m->rows_bytes() >> 20, HugeKbAt(m->Row(0)) >> 10, m->index_bytes() >> 20,
              HugeKbAt(m->index().data()) >> 10,
              static_cast<double>(m->index_bytes()) / static_cast<double>(n));
  return 0;
}
