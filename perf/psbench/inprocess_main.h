// Plumbing of the in-process job benchmarks (ps_repair_bench, ps_restart_bench, ps_leave_bench):
// their command lines end the same way (parse, --header, the transport by name, rounds); the
// restart and the leave share their table's shape, options and job sizing (BenchTable).
//
// Thread-safety: call from main only.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "tests/common/backends.h"
#include "tests/ps/cluster.h"

namespace ferry::ps::testing {

// Row i's key: spread over the ring.
inline uint64_t BenchKey(uint64_t i) {
  return i * 0x9e3779b97f4a7c15ull + 1;
}

inline double MsOf(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// One Adagrad table of `rows` x `dim` floats in `shards` shards, over `transport`, pushed in
// batches of `keys` keys, `rounds` times.
struct BenchTable {
  std::string transport = "tcp";
  uint64_t rows = 1500000;
  uint32_t dim = 16;
  uint32_t shards = 12;
  uint32_t keys = 4096;
  int rounds = 1;

  void AddOptions(CLI::App& app) {
    app.add_option("--transport", transport, "tcp, ucx-shm or ucx-tcp")->capture_default_str();
    app.add_option("--rows", rows, "rows the workers create")
        ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 32))
        ->capture_default_str();
    app.add_option("--dim", dim, "floats per row")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    app.add_option("--shards", shards, "shards (JobSpec::shards), at least the servers")
        ->check(CLI::Range(1, 65535))
        ->capture_default_str();
    app.add_option("--rounds", rounds, "rounds, one table row each")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
  }

  // The job: `servers`, 2 workers, ASP, the table (learning rate 1: a pushed row leaves the
  // initializer's range [-0.1, 0.1], which the benches check), `initial_rows` per server, rings
  // for 4 batches.
  JobSpec Job(const ferry::testing::BackendConfig& config, uint32_t servers,
              uint64_t initial_rows) const {
    JobSpec job = SmallJob(config, servers, 2, dim);
    job.shards = shards;
    job.consistency.kind = Consistency::kAsp;
    TableSpec& t = job.tables[0];
    t.optimizer.kind = Optimizer::kAdagrad;
    t.optimizer.learning_rate = 1.0f;
    t.init.kind = InitializerSpec::Kind::kUniform;
    t.init.a = -0.1f;
    t.init.b = 0.1f;
    t.initial_rows = static_cast<uint32_t>(initial_rows);
    job.max_keys_per_request = 4096;
    const uint64_t batch = std::max<uint64_t>(keys, 4096) * (8 + 4 * dim) + (1u << 20);
    job.staging_bytes = 4 * batch;
    job.send_bytes = 4 * batch;
    job.arena_bytes = 4 * batch;
    job.startup_timeout = Millis(120000);
    return job;
  }
};

// Parses the command line into `app` (whose options write `transport` and `rounds`), prints
// `header` with --header, checks the options with `validate` (an error message, or empty), finds
// the transport among the in-process ones (tcp, ucx-shm, ucx-tcp: no fault wrapper, no RDMA) and
// runs `round` `rounds` times, stopping at the first that fails. Returns main's exit code: 0,
// 1 (a round failed), 2 (bad flags, with a message on stderr naming `name`).
inline int RunRounds(CLI::App& app, int argc, char** argv, const std::string& name,
                     const std::string& transport, const int& rounds,
                     const std::function<void()>& header,
                     const std::function<std::string()>& validate,
                     const std::function<int(const ferry::testing::BackendConfig&)>& round) {
  bool header_only = false;
  app.add_flag("--header", header_only, "print only the table's header");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (header_only) {
    header();
    return 0;
  }
  if (const std::string error = validate(); !error.empty()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), error.c_str());
    return 2;
  }
  const ferry::testing::BackendConfig* config = nullptr;
  for (const auto& c : ferry::testing::AllConfigs()) {
    if (c.name == transport && !c.fault_wrapped && !c.single_threaded && !c.needs_rdma) config = &c;
  }
  if (config == nullptr) {
    std::fprintf(stderr, "%s: --transport must be tcp, ucx-shm or ucx-tcp\n", name.c_str());
    return 2;
  }
  for (int i = 0; i < rounds; ++i) {
    if (round(*config) != 0) return 1;
  }
  return 0;
}

}  // namespace ferry::ps::testing
