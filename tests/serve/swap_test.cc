// Hot swaps under load (models/serve/model_store.h through the HTTP server): clients score
// without pause while the export directory gets new deltas and bases, a corrupt version and a
// killed training job; not one request fails, every answer names a version that existed, and
// the versions a client sees never go back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "models/io/export_dir.h"
#include "models/io/export_manifest.h"
#include "models/serve/server.h"
#include "tests/serve/serve_test_util.h"

namespace ferry::serve_test {
namespace {

using models::Format;
using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// Clients posting one request after another until stopped, recording what they saw.
class LoadLoop {
 public:
  LoadLoop(int port, std::string body, int clients) {
    for (int i = 0; i < clients; ++i) {
      threads_.emplace_back([this, port, body] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(10, 0);
        uint64_t last = 0;
        while (!stop_.load()) {
          auto r = c.Post("/v1/models/ctr:predict", body, "application/json");
          std::lock_guard<std::mutex> lock(mu_);
          ++requests_;
          if (!r || r->status != 200) {
            failures_.push_back(r ? std::to_string(r->status) + " " + r->body
                                  : "no answer: " + httplib::to_string(r.error()));
            continue;
          }
          json j = json::parse(r->body, nullptr, false);
          if (j.is_discarded() || !j.contains("model_version")) {
            failures_.push_back("bad body " + r->body);
            continue;
          }
          const uint64_t v = j["model_version"].get<uint64_t>();
          if (v < last) failures_.push_back("version went back: " + std::to_string(v));
          last = v;
          seen_.insert(v);
        }
      });
    }
  }
  ~LoadLoop() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  uint64_t requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // Waits until n more requests have been answered (or 15 s passed: the test then fails on
  // what the clients saw).
  void WaitFor(uint64_t n) {
    const uint64_t target = requests() + n;
    for (int i = 0; i < 7500 && requests() < target; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  std::vector<std::string> failures_;
  std::set<uint64_t> seen_;

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  uint64_t requests_ = 0;
  std::vector<std::thread> threads_;
};

std::string Body(const std::string& test_file) {
  json inst = json::array();
  const std::vector<std::string> lines = Lines(Slurp(test_file));
  for (size_t i = 0; i < 5 && i < lines.size(); ++i) {
    inst.push_back(FeaturePart(lines[i], Format::kLibsvm));
  }
  return json{{"instances", inst}}.dump();
}

std::unique_ptr<models::Server> Start(const std::string& dir, std::vector<std::string>* log,
                                      std::mutex* log_mu) {
  models::ServerOptions o;
  o.follow.dir = dir;
  o.follow.poll_ms = 20;
  o.follow.log = [log, log_mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(*log_mu);
    log->push_back(line);
  };
  o.model_name = "ctr";
  o.port = 0;
  o.threads = 4;
  auto s = models::Server::Start(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// Waits until the server serves `version` (true) or 15 s pass (sanitizer builds are slow).
bool WaitForVersion(models::Server& s, uint64_t version) {
  for (int i = 0; i < 1500; ++i) {
    if (s.follower().Current()->version == version) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Publishes manifest entries [0, n) of `all` (their files copied from `from`) into `to`, as the
// writer does: files first, then the manifest by rename.
void Publish(const models::ExportManifest& all, size_t n, const std::string& from,
             const std::string& to) {
  models::ExportManifest m;
  for (size_t i = 0; i < n; ++i) {
    m.entries.push_back(all.entries[i]);
    const std::string file = all.entries[i].file;
    if (!fs::exists(to + "/" + file)) fs::copy_file(from + "/" + file, to + "/" + file);
  }
  ASSERT_TRUE(models::WriteExportManifest(to, m).ok());
}

TEST(ServeSwap, DeltasBasesAndACorruptVersionUnderContinuousLoad) {
  TempDir dir;
  const Data d = Generate(dir.path(), Format::kLibsvm);
  const std::string ex = dir / "ex";
  // fm, 2 passes over 3000 samples: a version every 600 samples, a base every 3 versions.
  TrainExport(
      d, "fm", ex,
      {"--epochs", "2", "--export-every", "600", "--base-every", "3", "--export-keep-bases", "0"});
  auto all = models::ReadExportManifest(ex);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  // The last base B after at least two deltas: versions up to B-2 go in one by one, B-1 (a
  // delta) goes in truncated, then B itself.
  size_t b = all->entries.size();
  while (b > 0 && !all->entries[b - 1].base) --b;
  ASSERT_GE(b, 4u) << "too few versions: " << all->entries.size();
  const size_t base_index = b - 1;  // entries[base_index] is B
  ASSERT_FALSE(all->entries[base_index - 1].base);

  const std::string served = dir / "served";
  fs::create_directory(served);
  Publish(*all, 1, ex, served);
  std::vector<std::string> log;
  std::mutex log_mu;
  auto server = Start(served, &log, &log_mu);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->follower().Current()->version, all->entries[0].version);
  LoadLoop load(server->port(), Body(d.test), 3);

  for (size_t n = 2; n < base_index; ++n) {
    Publish(*all, n, ex, served);
    ASSERT_TRUE(WaitForVersion(*server, all->entries[n - 1].version)) << n;
    load.WaitFor(5);
  }
  // A truncated delta: refused, logged, counted; the version before it keeps serving.
  const models::ExportEntry& broken = all->entries[base_index - 1];
  {
    const std::string bytes = Slurp(ex + "/" + broken.file);
    std::FILE* f = std::fopen((served + "/" + broken.file).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size() / 2, f);
    std::fclose(f);
  }
  Publish(*all, base_index, ex, served);
  for (int i = 0; i < 1500 && server->metrics().load_failures() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server->metrics().load_failures(), 1u);
  EXPECT_EQ(server->follower().Current()->version, all->entries[base_index - 2].version);
  {
    std::lock_guard<std::mutex> lock(log_mu);
    ASSERT_FALSE(log.empty());
    EXPECT_THAT(log.back(), HasSubstr("refused version " + std::to_string(broken.version)));
    EXPECT_THAT(log.back(), HasSubstr(broken.file));
  }
  // The next base needs nothing before it: serving moves on.
  Publish(*all, base_index + 1, ex, served);
  ASSERT_TRUE(WaitForVersion(*server, all->entries[base_index].version));
  load.WaitFor(20);
  load.Stop();

  EXPECT_TRUE(load.failures_.empty())
      << load.failures_.size() << " failed, first: " << load.failures_.front();
  std::set<uint64_t> existed;
  for (const models::ExportEntry& e : all->entries) existed.insert(e.version);
  for (uint64_t v : load.seen_) EXPECT_TRUE(existed.count(v)) << "version " << v;
  EXPECT_NE(load.seen_.count(all->entries[base_index].version), 0u);
  EXPECT_GE(load.seen_.size(), 3u);
  EXPECT_EQ(server->metrics().swaps(), base_index - 1);  // every version but the broken one
  // The served model is exactly the directory's: base + deltas as LoadExportDir reads them.
  auto fresh = models::LoadExportDir(served);
  ASSERT_TRUE(fresh.ok());
  const models::Model& now = server->follower().Current()->model;
  ASSERT_EQ(now.tables.size(), fresh->tables.size());
  for (size_t t = 0; t < now.tables.size(); ++t) {
    EXPECT_TRUE(std::ranges::equal(now.tables[t].keys(), fresh->tables[t].keys()));
    const auto a = now.tables[t].values(), b = fresh->tables[t].values();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size_bytes()), 0);  // bit for bit
  }
  std::printf("%llu requests over %zu versions\n", static_cast<unsigned long long>(load.requests()),
              load.seen_.size());
}

// The follower alone (no HTTP): a damaged manifest is logged and counted once while the current
// version keeps serving; a repaired one is followed again; a manifest whose versions went back
// (another job's directory) changes nothing.
TEST(ServeSwap, FollowerSurvivesADamagedManifest) {
  TempDir dir;
  const Data d = Generate(dir.path(), Format::kLibsvm);
  const std::string ex = dir / "ex";
  TrainExport(d, "lr", ex, {"--epochs", "1", "--export-every", "1000", "--export-keep-bases", "0"});
  auto all = models::ReadExportManifest(ex);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_GE(all->entries.size(), 3u);
  const std::string served = dir / "served";
  fs::create_directory(served);
  Publish(*all, 1, ex, served);
  models::ServeMetrics metrics;
  std::vector<std::string> log;
  models::FollowOptions o;
  o.dir = served;
  o.log = [&log](const std::string& line) { log.push_back(line); };
  auto f = models::ModelFollower::Open(o, &metrics);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  models::ModelFollower& follower = **f;
  const uint64_t v1 = all->entries[0].version, v2 = all->entries[1].version;
  EXPECT_FALSE(follower.PollOnce());  // nothing new

  // A manifest cut short (as if written in place and interrupted): refused, said once.
  Publish(*all, 2, ex, served);
  const std::string manifest = served + "/MANIFEST";
  const std::string good = Slurp(manifest);
  {
    std::FILE* m = std::fopen(manifest.c_str(), "wb");
    ASSERT_NE(m, nullptr);
    std::fwrite(good.data(), 1, good.size() - 10, m);
    std::fclose(m);
  }
  EXPECT_FALSE(follower.PollOnce());
  EXPECT_FALSE(follower.PollOnce());
  EXPECT_EQ(follower.Current()->version, v1);
  EXPECT_EQ(metrics.load_failures(), 1u);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("cannot read the manifest"));
  EXPECT_THAT(log[0], HasSubstr("still serving version " + std::to_string(v1)));

  // Repaired: followed again.
  Publish(*all, 2, ex, served);
  EXPECT_TRUE(follower.PollOnce());
  EXPECT_EQ(follower.Current()->version, v2);
  EXPECT_EQ(metrics.swaps(), 1u);

  // Versions that went back: nothing changes, nothing is refused.
  Publish(*all, 1, ex, served);
  EXPECT_FALSE(follower.PollOnce());
  EXPECT_EQ(follower.Current()->version, v2);
  EXPECT_EQ(metrics.load_failures(), 1u);
}

TEST(ServeSwap, AKilledTrainingJobLeavesServingUntouched) {
  TempDir dir;
  const std::string ex = dir / "ex";
  // A stream job publishing a version every 2000 samples, paced so that it is still training
  // when it is killed.
  const std::string cmd = "'" + train_test::GenBin() +
                          "' --stream --rate 20000 --fields 8 --features 4000 --seed 3 | '" +
                          train_test::TrainBin() +
                          "' --train - --model fm --transport tcp --window 2000 --progress never "
                          "-q --export-every 2000 --base-every 2 --export-dir '" +
                          ex + "'";
  Background job({"/bin/sh", "-c", cmd}, 60);
  // Serving starts once the job has published its first version.
  bool published = false;
  for (int i = 0; i < 3000 && !published; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    published = models::ReadExportManifest(ex).ok();
  }
  if (!published) {
    job.Signal(SIGKILL);
    FAIL() << "no version within 30 s: " << job.Wait().Describe();
  }
  std::vector<std::string> log;
  std::mutex log_mu;
  auto server = Start(ex, &log, &log_mu);
  ASSERT_NE(server, nullptr);
  std::string body = R"({"instances": ["1:1 16777300:1", "5:1"]})";
  LoadLoop load(server->port(), body, 2);
  // Let it publish (and the server swap) once more, then kill the whole job mid-stream.
  const uint64_t first = server->follower().Current()->version;
  for (int i = 0; i < 300 && server->follower().Current()->version == first; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  job.Signal(SIGKILL);  // the whole job: ferry-gen, ferry-train and its ranks
  job.Wait();
  const uint64_t at_kill = server->follower().Current()->version;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  load.WaitFor(20);
  load.Stop();

  EXPECT_TRUE(load.failures_.empty())
      << load.failures_.size() << " failed, first: " << load.failures_.front();
  auto m = models::ReadExportManifest(ex);
  ASSERT_TRUE(m.ok()) << m.status().ToString();  // the manifest is never left half-written
  std::set<uint64_t> existed;
  for (const models::ExportEntry& e : m->entries) existed.insert(e.version);
  for (uint64_t v : load.seen_) EXPECT_TRUE(existed.count(v)) << "version " << v;
  // The last complete version the job published is the one served (once polled).
  EXPECT_TRUE(WaitForVersion(*server, m->entries.back().version));
  EXPECT_GE(server->follower().Current()->version, at_kill);
  EXPECT_EQ(server->metrics().load_failures(), 0u);
  std::printf("job killed at version %llu; %llu requests, versions %llu..%llu\n",
              static_cast<unsigned long long>(at_kill),
              static_cast<unsigned long long>(load.requests()),
              static_cast<unsigned long long>(*load.seen_.begin()),
              static_cast<unsigned long long>(*load.seen_.rbegin()));
}

}  // namespace
}  // namespace ferry::serve_test
