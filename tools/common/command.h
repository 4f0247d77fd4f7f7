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
// app's name, description, footer and formatter. Not thread-safe (command-line setup only).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace ferry::tools
