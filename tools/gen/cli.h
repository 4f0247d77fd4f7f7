// ferry-gen's command line and run: the tool's main calls Main (the man page, AddFlags,
// ParseAndExecute); the generator itself is models/data/gen.h. Only cli.cc compiles CLI11 (its
// header alone costs 7-10 s per file).
//
// Flags in, GenOptions out: the counts accept "1000000", "1e6" or "1M"; --fields and --words
// belong to one layout each; --format criteo without --fields / --numeric takes Criteo's column
// counts. --stream writes the training samples to stdout (no summary) and ends with 0 when the
// reader closes the pipe (SIGPIPE is ignored, EPIPE ends the stream). Exit codes: 0 success
// (and --help), 2 bad command line, 1 I/O failure.
//
// Thread-safety: command-line setup and the main thread only. Resolve, ParseCount and
// FormatSummary are pure.
#pragma once

#include <cstdint>
#include <string>

#include "models/data/gen.h"
#include "transport/status.h"

namespace CLI {
class App;  // <CLI/CLI.hpp>: only the .cc files that build the flags include it
}  // namespace CLI

namespace ferry::gen {

struct GenFlags {
  // Flags that are GenOptions fields as they stand (--out, --vocab, --zipf, ...).
  models::GenOptions direct;
  // Raw flag values; Resolve turns them into the other GenOptions fields.
  std::string samples, test_samples = "0", features = "0";
  std::string format = "libsvm", truth = "lr", layout = "ctr", drift_every = "100K";
  bool quiet = false;
  bool stream = false;  // --stream: the training samples to stdout (GenerateStream)
  double rate = 0;      // --stream --rate: samples per second, 0 unlimited
  // Whether --fields, --words, --numeric, --rate were given (set after parsing).
  bool fields_given = false, words_given = false, numeric_given = false, rate_given = false;
};

// The flag table.
void AddFlags(CLI::App& app, GenFlags& f);

// "1000000", "1e6" or "1M" (k, M, G suffixes) as a whole count up to 1e15; kInvalidArgument
// "<flag> '<text>' is not a count (e.g. 1000000, 1e6 or 1M)" otherwise.
Result<uint64_t> ParseCount(const std::string& flag, const std::string& text);

// The options Generate() runs with; kInvalidArgument (naming the flag) on bad usage. With
// --stream: samples is the stream's length (0: endless), and --out, --test-samples, --test-out
// and --gzip are refused (the stream goes to stdout; with --drift --truth-out too); without it,
// --rate is refused and --samples is required.
Result<models::GenOptions> Resolve(const GenFlags& f);

// What ferry-gen prints after a run: the files written, the truth model, the Bayes figures.
std::string FormatSummary(const models::GenOptions& o, const models::GenSummary& s);

// Parses argv into `f`, generates, prints the summary (unless --quiet); returns the exit code.
int ParseAndExecute(CLI::App& app, GenFlags& f, int argc, char** argv);

// ferry-gen's main (the man page, the flags and the run); returns the exit code.
int Main(int argc, char** argv);

}  // namespace ferry::gen
