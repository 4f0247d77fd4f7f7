// The command line shared by ferry-lat and ferry-bw (perftest / ucx_perftest habits) and the
// run logic behind it: server mode (no peer address), client mode (an address), and --local (a
// client that starts its own server process on 127.0.0.1). Each tool's main calls LatMain or
// BwMain (its man page, AddFlags, ParseAndExecute); only cli.cc compiles CLI11.
//
// Exit codes of Execute(): 0 success, 1 runtime failure (including a verification failure),
// 2 bad usage. It never throws.
#pragma once

#include <string>
#include <vector>

#include "tools/bench/config.h"
#include "tools/bench/runner.h"

namespace CLI {
class App;  // <CLI/CLI.hpp>: only the .cc files that build the flags include it
}  // namespace CLI

namespace ferry::bench {

struct ToolOptions {
  Mode mode = Mode::kLatency;
  PeerOptions peer;
  BenchConfig config;
  std::string address;    // peer to connect to; empty: be the server
  uint16_t port = 18515;  // perftest's default port
  std::string bind = "127.0.0.1";
  bool local = false;
  bool report_port = false;  // internal: print the listen banner (used by --local)
  std::string json_path, csv_path, plot_path;
  double accept_timeout_s = 0;  // server: 0 waits for a client indefinitely

  // Raw flag values, turned into `peer` and `config` by Resolve().
  std::string transport = "auto";
  std::vector<std::string> params;
  std::string device, gid_index, ib_port;
  std::string op = "send";
  bool all_sizes = false;
  std::vector<std::string> sizes;
  std::string row_size = "256", region_size = "64M";
  std::string check;        // --check; empty: both (--no-verify: ref)
  std::string thread_mode;  // --thread-mode; empty: see Resolve
  double timeout_s = 10;
};

// Adds the flags common to both tools; `mode` picks the defaults (iterations, size) and whether
// the bandwidth-only flags (--depth, --bidir) exist.
void AddFlags(CLI::App& app, ToolOptions& o, Mode mode);

// Validates the parsed flags and fills o.peer / o.config. kInvalidArgument on bad usage.
Status Resolve(ToolOptions& o);

// The flags that make a child process the server of a --local run.
std::vector<std::string> LocalServerArgs(const ToolOptions& o);

// "host:port" for the client: the address as given, with --port appended if it has none.
std::string ClientAddress(const ToolOptions& o);

// Runs the resolved options: server, client or --local. Prints results; returns the exit code.
int Execute(const ToolOptions& o);

// Parses argv into `o` and runs it: the whole of a tool's main after its flags are declared.
int ParseAndExecute(CLI::App& app, ToolOptions& o, int argc, char** argv);

// ferry-lat's main (its man page; the flags and the run are shared with ferry-bw).
int LatMain(int argc, char** argv);

// ferry-bw's main (its man page; the flags and the run are shared with ferry-lat).
int BwMain(int argc, char** argv);

}  // namespace ferry::bench
