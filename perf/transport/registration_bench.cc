// What registering and deregistering a region costs on one backend configuration: the price of
// UCX_IB_REG_METHODS=direct (final deregistration, transport/ucx/setup.cc) against UCX's
// registration cache, and the same for any backend. Ferry registers a region once, so this is a
// set-up cost, not a per-operation one. Prints one line per size: the median of `rounds`
// register+deregister pairs of a fresh, touched buffer (the cache would otherwise find it).
//
//   registration_bench BACKEND [KEY=VALUE...]      e.g. registration_bench ucx
//   UCX_TLS=rc_verbs,self
//                                                       UCX_IB_REG_METHODS=rcache,odp,direct
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "transport/transport.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s BACKEND [KEY=VALUE...]\n", argv[0]);
    return 2;
  }
  ferry::TransportOptions o;
  for (int i = 2; i < argc; ++i) {
    const char* eq = std::strchr(argv[i], '=');
    if (eq == nullptr) {
      std::fprintf(stderr, "parameter '%s' is not KEY=VALUE\n", argv[i]);
      return 2;
    }
    o.params[std::string(argv[i], static_cast<size_t>(eq - argv[i]))] = eq + 1;
  }
  auto t = ferry::CreateTransport(argv[1], o);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    return 1;
  }
  const ferry::Capabilities& caps = (*t)->capabilities();
  std::printf("backend %s: target_checks=%d final_deregistration=%d\n", argv[1], caps.target_checks,
              caps.final_deregistration);
  constexpr int kRounds = 21;
  for (size_t bytes : {size_t{4} << 10, size_t{1} << 20, size_t{64} << 20}) {
    std::vector<double> us;
    for (int r = 0; r < kRounds; ++r) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return 1;
      std::memset(p, 1, bytes);
      const auto start = std::chrono::steady_clock::now();
      auto mr = (*t)->RegisterMemory(p, bytes, ferry::kAccessRemote);
      if (!mr.ok()) {
        std::fprintf(stderr, "%s\n", mr.status().ToString().c_str());
        return 1;
      }
      mr->reset();
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      munmap(p, bytes);
    }
    std::sort(us.begin(), us.end());
    std::printf("register+deregister %8zu KiB: median %9.1f us (min %9.1f, max %9.1f)\n",
                bytes >> 10, us[kRounds / 2], us.front(), us.back());
  }
  return 0;
}
