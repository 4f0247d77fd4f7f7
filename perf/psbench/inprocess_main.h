// Plumbing of the in-process job benchmarks (ps_repair_bench, ps_restart_bench): their command
// lines end the same way (parse, --header, the transport by name, rounds).
//
// Thread-safety: call from main only.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <string>

#include "tests/common/backends.h"

namespace ferry::ps::testing {

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
