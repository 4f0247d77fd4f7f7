#include "models/train/feature_flags.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <string>

namespace ferry::models {

namespace {

// "30s", "5m", "2h" (seconds, minutes, hours; a decimal number) or "100000" (samples): sets one
// of the two and clears the other.
void ParseExportEvery(const std::string& text, ExportOptions* o) {
  const std::string bad =
      "--export-every '" + text + "': give seconds as 30s, 5m or 2h, or a sample count as 100000";
  if (text.empty()) throw CLI::ValidationError(bad);
  const char unit = text.back();
  o->every_seconds = 0;
  o->every_samples = 0;
  if (unit == 's' || unit == 'm' || unit == 'h') {
    double v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size() - 1, v);
    if (ec != std::errc() || p != text.data() + text.size() - 1 || !(v > 0)) {
      throw CLI::ValidationError(bad);
    }
    o->every_seconds = v * (unit == 's' ? 1 : unit == 'm' ? 60 : 3600);
    return;
  }
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p != text.data() + text.size() || n == 0) {
    throw CLI::ValidationError(bad);
  }
  o->every_samples = n;
}

}  // namespace

void AddStreamFlags(CLI::App& app, StreamOptions* o) {
  auto* group = "Continuous training (--train - or a FIFO: one pass over an unbounded stream)";
  app.add_option("--window", o->window_samples,
                 "samples per progressive-evaluation window: each sample is scored before it is\n"
                 "trained on, and every window prints one line of metrics (default 100000, or\n"
                 "none with --window-seconds alone)")
      ->group(group);
  app.add_option("--window-seconds", o->window_seconds,
                 "seconds per window (a window ends at --window samples or at this, the first)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
  app.add_option("--max-samples", o->max_samples,
                 "end the job after this many training samples (0: at the end of the stream)")
      ->group(group);
  app.add_option("--follow", o->follow,
                 "DIR: train on the files that appear in DIR, in name order, each once (a file\n"
                 "counts once renamed into place; names starting with '.' are ignored); FILE:\n"
                 "tail a growing file. Instead of --train; ends with --idle-exit, --max-samples\n"
                 "or Ctrl-C. DIR with --consistency bsp: every worker follows DIR itself and\n"
                 "takes every W-th file (new names must sort after the old), one batch per\n"
                 "clock, so --checkpoint-dir/--resume continue exactly once (a stop or\n"
                 "--idle-exit ends with a checkpoint); FILE with bsp: every worker tails it and\n"
                 "takes every W-th batch of lines, the same way; other streams (pipes,\n"
                 "stdin) resume at most once: what they gave is not read again")
      ->group(group);
  app.add_option("--idle-exit", o->idle_exit_seconds,
                 "end the job after this many seconds without new input (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
}

void AddFeatureFlags(CLI::App& app, FeatureOptions* o) {
  auto* group = "Feature admission and eviction (every sparse table, on every server)";
  app.add_option("--admit-min-count", o->admit_min_count,
                 "a new feature gets a row at its N-th sighting (count-min sketch; 0: at once);\n"
                 "until then it reads as zero and its gradients are dropped")
      ->group(group);
  app.add_option("--admit-prob", o->admit_prob,
                 "each sighting of a feature without a row admits it with this probability")
      ->check(CLI::Range(0.0, 1.0))
      ->group(group);
  app.add_option("--evict-unseen", o->evict_unseen_seconds,
                 "seconds: rows not seen for this long are evicted (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
  app.add_option("--evict-score", o->evict_score,
                 "rows whose decayed score (sightings, decayed by --score-decay) falls below this\n"
                 "are evicted (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
  app.add_option("--score-decay", o->score_decay,
                 "factor each row's score is multiplied by every second")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str()
      ->group(group);
  app.add_option("--max-rows-per-server", o->max_rows_per_server,
                 "rows per table and server: at the bound the lowest-scored rows are evicted")
      ->group(group);
  app.add_option("--evict-tick", o->tick_seconds, "seconds between the servers' eviction passes")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str()
      ->group(group);
}

void AddExportFlags(CLI::App& app, ExportOptions* o) {
  auto* group = "Incremental export for serving";
  auto* dir = app.add_option("--export-dir", o->dir,
                             "publish the model into DIR while training: versions, each a full\n"
                             "base or a delta (changed rows, removed keys) on the one before,\n"
                             "listed in DIR/MANIFEST; the last version is the final model.\n"
                             "ferry-predict DIR scores with the newest (docs/model-format.md)")
                  ->type_name("DIR")
                  ->group(group);
  app.add_option_function<std::string>(
         "--export-every", [o](const std::string& v) { ParseExportEvery(v, o); },
         "a version every 30s / 5m / 2h, or every N training samples (all\n"
         "workers): bsp/ssp at a clock boundary, asp between worker 0's batches,\n"
         "streams after a window; without it, one version at the end")
      ->type_name("30s|5m|2h|N")
      ->needs(dir)
      ->group(group);
  app.add_option("--base-every", o->base_every,
                 "a full base every K versions, deltas in between (1: only bases)")
      ->type_name("K")
      ->check(CLI::Range(1u, 1000000u))
      ->needs(dir)
      ->capture_default_str()
      ->group(group);
  app.add_option("--export-keep-bases", o->keep_bases,
                 "bases kept in the export directory, each with its deltas\n"
                 "(0: keep every version)")
      ->type_name("B")
      ->needs(dir)
      ->capture_default_str()
      ->group(group);
}

}  // namespace ferry::models
