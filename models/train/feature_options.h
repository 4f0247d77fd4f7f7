// What ferry-train is told about a continuous job, about the life of feature rows and about
// publishing the model while it trains: value types inside TrainOptions (train_options.h),
// filled by the flags of feature_flags.h.
//
// Thread-safety: value types; built on the main thread, then read only.
#pragma once

#include <cstdint>
#include <string>

namespace ferry::models {

// Continuous training from a stream (models/train/stream_loop.h).
struct StreamOptions {
  // Progressive evaluation window: every `window_samples` samples (0: by time only) or every
  // `window_seconds` seconds (0: by samples only), whichever comes first, one line of metrics.
  // Both 0 with a stream input: kDefaultWindowSamples.
  uint64_t window_samples = 0;
  double window_seconds = 0;
  // The job ends after this many training samples over all workers (0: when the stream ends).
  uint64_t max_samples = 0;
  // The job ends when no new input came for this many seconds (0: never, wait for the end).
  double idle_exit_seconds = 0;
  // A directory whose files are trained on as they appear (in name order, each once; a file
  // counts when it is renamed into place), or a file tailed as it grows: the training input
  // instead of --train (models/data/follow_input.h).
  std::string follow;
  static constexpr uint64_t kDefaultWindowSamples = 100000;
};

// Feature admission and eviction, applied by every server to every sparse table (ps::TableSpec's
// admission and max_rows, and the servers' eviction tick). All off by default.
struct FeatureOptions {
  uint32_t admit_min_count = 0;  // >= 2: a key gets a row at its N-th sighting (count-min sketch)
  double admit_prob = 1.0;       // < 1: each sighting of an absent key admits it with this chance
  double evict_unseen_seconds = 0;   // > 0: rows not seen for this long are evicted
  float evict_score = 0;             // > 0: rows whose decayed score falls below are evicted
  double score_decay = 0.98;         // factor a row's score is multiplied by every second
  uint64_t max_rows_per_server = 0;  // > 0: per table and server; the lowest-scored rows go
  double tick_seconds = 1.0;         // how often servers age scores and evict
  bool any() const {
    return admit_min_count >= 2 || admit_prob < 1.0 || evict_unseen_seconds > 0 ||
           evict_score > 0 || max_rows_per_server > 0;
  }
};

// Incremental export for serving (feature_flags.h AddExportFlags; models/io/export_writer.h):
// worker 0 publishes the model into `dir` as versions, each a full base or a delta on the one
// before, every `every_seconds` seconds or `every_samples` training samples (all workers), and
// once more at the end with the final model.
struct ExportOptions {
  std::string dir;             // "": no export directory
  double every_seconds = 0;    // > 0: a version when this much time passed since the last one
  uint64_t every_samples = 0;  // > 0: a version every this many samples (0 and 0: at the end)
  uint32_t base_every = 10;    // a full base every this many versions, deltas in between
  uint32_t keep_bases = 2;     // bases (with their deltas) kept in `dir`; 0: every version
};

}  // namespace ferry::models
