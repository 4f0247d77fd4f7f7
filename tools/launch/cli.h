// ferry-launch's command line and run: the tool's main calls Main (the man page, AddFlags,
// ParseAndExecute); the launch engine is ps/launch/local_cluster.h. Only cli.cc compiles CLI11.
//
// The command line is `ferry-launch [flags] [--] PROGRAM ARGS...`: ferry-launch's flags end at the
// first "--" or at PROGRAM; everything after belongs to PROGRAM (a "--" after PROGRAM is kept).
// Exit codes: the job's, 2 bad command line, 126 PROGRAM not executable, 127 PROGRAM not found,
// 1 any other launcher failure (see ferry_launch.cc).
//
// Thread-safety: command-line setup and the main thread only. FlagsEnd, Resolve and
// ExitCodeFor are pure; ParseAndExecute blocks until the job ends.
#pragma once

#include <string>
#include <vector>

#include "ps/launch/local_cluster.h"
#include "transport/status.h"

namespace CLI {
class App;  // <CLI/CLI.hpp>: only the .cc files that build the flags include it
}  // namespace CLI

namespace ferry::launch {

inline constexpr const char* kUsage =
    "ferry-launch --servers S --workers W [options] -- PROGRAM ARGS...";

struct LaunchFlags {
  // Flags that are LocalClusterOptions fields as they stand (--servers, --workers, --replicas,
  // --transport, --tag-output).
  ps::LocalClusterOptions direct;
  // Raw flag values; Resolve turns them into the other fields.
  std::string rule = "servers-first";
  double timeout_s = 0, startup_timeout_s = 120, kill_grace_s = 5;
  std::vector<std::string> env;
};

// The flag table (and prefix_command: PROGRAM and what follows are not ferry-launch's).
void AddFlags(CLI::App& app, LaunchFlags& f);

// The index in argv of the first "--" (argc when there is none): ferry-launch parses argv up to
// it.
int FlagsEnd(int argc, const char* const* argv);

// The cluster to run: `remaining` is what CLI11 left of argv[0, flags_end) (PROGRAM and its
// arguments), `after` the arguments after the "--" at flags_end (if any). kInvalidArgument on bad
// usage (an unknown option, no PROGRAM, an --env that is not KEY=VALUE).
Result<ps::LocalClusterOptions> Resolve(const LaunchFlags& f, std::vector<std::string> remaining,
                                        bool had_separator, const std::vector<std::string>& after);

// The exit code for a launcher failure: 2 bad usage, 126 not executable, 127 not found, else 1.
int ExitCodeFor(const Status& s);

// Parses argv, runs the job on this host; returns the job's exit code or the launcher's.
int ParseAndExecute(CLI::App& app, LaunchFlags& f, int argc, char** argv);

// ferry-launch's main (the man page, the flags and the run); returns the exit code.
int Main(int argc, char** argv);

}  // namespace ferry::launch
