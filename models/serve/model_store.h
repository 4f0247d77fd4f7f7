// The model ferry-serve scores with, and how it follows an export directory
// (docs/model-format.md, "Export directories"; docs/serving.md, "Hot swap").
//
//   ServedModel    one version, immutable once built: the Model, its Scorer, version, load time,
//                  rows per table. Shared as std::shared_ptr<const ServedModel>.
//   ModelFollower  holds the current version and a thread that polls DIR/MANIFEST. A new version
//                  is loaded off to the side (the newest base and the deltas after it,
//                  LoadExportDir) and swapped in under a mutex held for a pointer exchange;
//                  requests never wait on a load.
//
// Lifetime: a request takes Current() once and scores with it from start to end; the version it
// holds stays alive (its memory included) until its last holder drops it, however many swaps
// happen meanwhile. While a load runs, the old and the new version are both in memory.
// A version that fails to load (truncated, corrupt, a delta that does not follow) is logged and
// counted (ServeMetrics::CountLoadFailure); the current version keeps serving, and the follower
// tries again when the manifest names a newer version.
//
// Thread-safety: Current() from any thread; it never waits on a load (current_mu_ is held for a
// shared_ptr copy or exchange only, never while a version loads or is freed).
// PollOnce() from one thread at a time (the follower's own, or a test's before Start).
// Blocking: Open and PollOnce read files; Stop joins the thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "models/io/model.h"
#include "models/serve/metrics.h"
#include "models/train/predict.h"
#include "transport/status.h"

namespace ferry::models {

struct ServedModel {
  Model model;
  std::optional<Scorer> scorer;  // reads `model` in place: the two live and die together
  uint64_t version = 0;
  uint64_t load_unix_ms = 0;  // when this process finished loading it
  double load_seconds = 0;
  std::vector<std::pair<std::string, uint64_t>> rows;  // per table, in the model's order
};

// Loads the newest version of DIR (LoadExportDir) and builds its Scorer. Errors name DIR.
Result<std::shared_ptr<const ServedModel>> LoadServedModel(const std::string& dir,
                                                           const ScorerOptions& scorer);

struct FollowOptions {
  std::string dir;
  ScorerOptions scorer;
  int poll_ms = 200;  // how often the thread reads DIR/MANIFEST
  // Where load errors and swaps are reported (one line each; default: stderr).
  std::function<void(const std::string&)> log;
};

class ModelFollower {
 public:
  // Loads the newest version; an error if DIR has none that loads. Does not start the thread.
  static Result<std::unique_ptr<ModelFollower>> Open(FollowOptions o, ServeMetrics* metrics);
  ~ModelFollower();  // Stop()

  std::shared_ptr<const ServedModel> Current() const {
    std::lock_guard<std::mutex> lock(current_mu_);
    return current_;
  }

  // Reads the manifest once; a newer version is loaded and swapped in. True when it swapped.
  bool PollOnce();
  void Start();  // the polling thread
  void Stop();   // idempotent

 private:
  ModelFollower(FollowOptions o, ServeMetrics* metrics) : o_(std::move(o)), metrics_(metrics) {}
  void Log(const std::string& line) const;
  void Swap(std::shared_ptr<const ServedModel> next);

  FollowOptions o_;
  ServeMetrics* metrics_;  // borrowed; outlives this
  // Not std::atomic<std::shared_ptr>: GCC 12's load() releases its lock bit with a relaxed store,
  // so a load's read of the pointer does not happen-before the next store's write (TSan reports
  // it; google/sanitizers#1558). A request pays one uncontended lock.
  mutable std::mutex current_mu_;
  std::shared_ptr<const ServedModel> current_;
  uint64_t refused_version_ = 0;  // the newest version that failed: logged once, not retried
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ferry::models
