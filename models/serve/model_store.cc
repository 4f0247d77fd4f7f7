// Loading versions of an export directory and swapping them in (model_store.h).
#include "models/serve/model_store.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

#include "models/io/export_dir.h"
#include "models/io/export_manifest.h"

namespace ferry::models {

namespace {

uint64_t UnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

Result<std::shared_ptr<const ServedModel>> LoadServedModel(const std::string& dir,
                                                           const ScorerOptions& scorer) {
  const auto start = std::chrono::steady_clock::now();
  auto served = std::make_shared<ServedModel>();
  auto model = LoadExportDir(dir, &served->version);
  if (!model.ok()) return model.status().Annotate(dir);
  served->model = std::move(*model);
  // The Scorer points into served->model's tables: built after the model has its final address.
  auto s = Scorer::Create(served->model, scorer);
  if (!s.ok()) return s.status().Annotate(dir + " version " + std::to_string(served->version));
  served->scorer.emplace(std::move(*s));
  for (const ModelTable& t : served->model.tables) served->rows.emplace_back(t.name(), t.size());
  served->load_unix_ms = UnixMs();
  served->load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::shared_ptr<const ServedModel>(std::move(served));
}

Result<std::unique_ptr<ModelFollower>> ModelFollower::Open(FollowOptions o, ServeMetrics* metrics) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const ServedModel> first,
                         LoadServedModel(o.dir, o.scorer));
  std::unique_ptr<ModelFollower> f(new ModelFollower(std::move(o), metrics));
  metrics->SetModel(first->version, first->load_seconds);
  f->current_ = std::move(first);
  return f;
}

ModelFollower::~ModelFollower() {
  Stop();
}

void ModelFollower::Log(const std::string& line) const {
  if (o_.log) {
    o_.log(line);
    return;
  }
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s ferry-serve: %s\n", stamp, line.c_str());
}

void ModelFollower::Swap(std::shared_ptr<const ServedModel> next) {
  const uint64_t version = next->version;
  const double seconds = next->load_seconds;
  // The old version is released here, outside the lock, by this pointer; requests holding it
  // keep it alive.
  std::shared_ptr<const ServedModel> old;
  {
    std::lock_guard<std::mutex> lock(current_mu_);
    old = std::exchange(current_, std::move(next));
  }
  old.reset();
  metrics_->SetModel(version, seconds);
  metrics_->CountSwap();
}

bool ModelFollower::PollOnce() {
  auto manifest = ReadExportManifest(o_.dir);
  const uint64_t current = Current()->version;
  if (!manifest.ok()) {
    // A manifest is replaced by rename, so a damaged one is damage, not a race: say so once.
    if (refused_version_ != UINT64_MAX) {
      Log("cannot read the manifest of " + o_.dir + ": " + manifest.status().ToString() +
          "; still serving version " + std::to_string(current));
      metrics_->CountLoadFailure();
      refused_version_ = UINT64_MAX;
    }
    return false;
  }
  if (refused_version_ == UINT64_MAX) refused_version_ = 0;
  if (manifest->entries.empty()) return false;
  const uint64_t newest = manifest->entries.back().version;
  if (newest <= current || newest == refused_version_) return false;
  auto next = LoadServedModel(o_.dir, o_.scorer);
  if (!next.ok()) {
    Log("refused version " + std::to_string(newest) + ": " + next.status().ToString() +
        "; still serving version " + std::to_string(current));
    metrics_->CountLoadFailure();
    refused_version_ = newest;
    return false;
  }
  if ((*next)->version <= current) return false;  // the manifest went back (a new job's dir)
  Log("serving version " + std::to_string((*next)->version) + " (was " + std::to_string(current) +
      "; loaded in " + std::to_string(static_cast<int>((*next)->load_seconds * 1000)) + " ms)");
  Swap(std::move(*next));
  return true;
}

void ModelFollower::Start() {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      PollOnce();
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(o_.poll_ms), [this] { return stop_; });
    }
  });
}

void ModelFollower::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ferry::models
