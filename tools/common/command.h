// One command-line face for every Ferry command (ferry-info, ferry-lat, ferry-bw, ferry-plot,
// ferry-gen, ferry-launch, ferry-ps-bench, ferry-train, ferry-predict; ferry-vm and ferry-rxe are
// bash and follow the same layout by hand):
//
//   --version   prints "<name> (Ferry) <version>" on stdout and exits 0;
//   --help      prints man-page sections in a fixed order: NAME, SYNOPSIS, DESCRIPTION, the
//               option groups (OPTIONS, POSITIONALS, ...), EXAMPLES, EXIT STATUS, SEE ALSO,
//               VERSION.
//
// Usage: build the CLI::App as usual, then call SetUpCommand() before parsing. It replaces the
// app's name, description, footer and formatter; then ParseCommandLine() parses, and the
// errors a tool finds afterwards go out through ReportError(). Not thread-safe (command-line setup
// and the main thread's error reporting only).
//
// Exit codes every command shares: 0 success (and --help, --version), 2 bad command line.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/status.h"

namespace CLI {
class App;  // <CLI/CLI.hpp>: only the .cc files that build the flags include it
}  // namespace CLI

namespace ferry::tools {

struct CommandDoc {
  std::string name;                   // "ferry-bw"
  std::string summary;                // one line after "name - "
  std::string description;            // paragraphs (\n-separated lines; indented on output)
  std::string synopsis;               // empty: CLI11's "name [OPTIONS] positionals"
  std::vector<std::string> examples;  // one command line each
  std::string exit_status;            // empty: no EXIT STATUS section
  std::vector<std::string> see_also;  // other commands ("ferry-lat") or docs ("docs/tools.md")
};

// "<name> (Ferry) <version>", the --version line.
std::string VersionLine(std::string_view name);

void SetUpCommand(CLI::App& app, CommandDoc doc);

// Parses argv into the app's flags. nullopt: go on; otherwise the exit code main returns (0
// after --help / --version, 2 after a parse error, which CLI11 has printed).
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

// Prints "<tool>: error: <message>" on stderr, and "Run with --help for usage." when `code` is 2
// (bad command line). Returns `code`.
int ReportError(std::string_view tool, const std::string& message, int code);

// "KEY=VALUE" (KEY not empty) as (KEY, VALUE); else kInvalidArgument
// "<flag> '<text>' is not KEY=VALUE".
Result<std::pair<std::string, std::string>> SplitKeyValue(std::string_view flag,
                                                          const std::string& text);

}  // namespace ferry::tools
