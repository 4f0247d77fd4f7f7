#include "models/train/feature_flags.h"

#include <CLI/CLI.hpp>

namespace ferry::models {

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
                 "or Ctrl-C")
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

}  // namespace ferry::models
