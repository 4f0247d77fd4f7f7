#include "tests/ps/cluster.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace ferry::ps::testing {

JobSpec SmallJob(const ferry::testing::BackendConfig& config, uint32_t servers, uint32_t workers,
                 uint32_t dim) {
  JobSpec job;
  TableSpec t;
  t.name = "t";
  t.dim = dim;
  t.initial_rows = 256;
  job.tables.push_back(t);
  job.servers = servers;
  job.workers = workers;
  job.transport = config.backend;
  job.transport_params = config.params;
  job.peer_timeout = Millis(5000);
  job.startup_timeout = Millis(30000);
  job.staging_bytes = 1u << 20;
  job.arena_bytes = 4u << 20;
  job.send_bytes = 4u << 20;
  job.max_keys_per_request = 4096;
  job.max_outstanding = 16;
  return job;
}

std::string RankOutcome::ToString() const {
  if (!start.ok()) return "start: " + start.ToString();
  if (!body.ok()) return "body: " + body.ToString();
  if (!join.ok()) return "join: " + join.ToString();
  return "ok";
}

uint32_t TestServerThreads() {
  const char* v = std::getenv("FERRY_TEST_SERVER_THREADS");
  if (v == nullptr || *v == '\0') return 1;
  const long t = std::strtol(v, nullptr, 10);
  if (t < 1 || t > 64) {
    std::fprintf(stderr, "FERRY_TEST_SERVER_THREADS=%s is not 1..64\n", v);
    std::abort();
  }
  return static_cast<uint32_t>(t);
}

std::vector<RankOutcome> RunJob(const JobSpec& spec, const std::function<Status(Node&)>& body,
                                Millis deadline,
                                const std::function<void(int rank)>& before_start) {
  JobSpec job = spec;
  if (job.server_threads == 1) job.server_threads = TestServerThreads();  // else the test's own
  const int size = RanksNeeded(job);
  static std::atomic<int> counter{0};
  const std::string file =
      "/tmp/ferry-test-coordinator-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  ::unlink(file.c_str());
  std::vector<RankOutcome> out(size);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<const char*> stage(size, "starting");  // where each rank is (for a hang report)
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      LaunchEnv env;
      env.launcher = Launcher::kFerry;
      env.rank = r;
      env.size = size;
      env.local_rank = r;
      env.local_size = size;
      env.coordinator_file = file;
      if (before_start) before_start(r);
      auto node = Node::Start(job, env);
      RankOutcome& o = out[r];
      if (!node.ok()) {
        o.start = node.status();
      } else {
        {
          std::lock_guard<std::mutex> lock(mu);
          stage[r] = "in the test body";
        }
        o.body = body(**node);
        {
          std::lock_guard<std::mutex> lock(mu);
          stage[r] = "in Node::Join";
        }
        o.join = (*node)->Join();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        stage[r] = "done";
      }
      node = Status(Code::kCancelled, "destroyed");  // destroy the node on this thread
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, deadline, [&] { return done == size; })) {
      std::fprintf(stderr, "RunJob: the job did not end within %lld ms (a hang); ranks:\n",
                   static_cast<long long>(deadline.count()));
      for (int r = 0; r < size; ++r) {
        std::fprintf(stderr, "  rank %d: %s; %s\n", r, stage[r], out[r].ToString().c_str());
      }
      std::fflush(stderr);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  ::unlink(file.c_str());
  return out;
}

Status AllOk(const std::vector<RankOutcome>& outcomes) {
  Status first;
  std::string all;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    const RankOutcome& o = outcomes[r];
    if (o.ok()) continue;
    all += "\n  rank " + std::to_string(r) + ": " + o.ToString();
    if (first.ok()) first = !o.start.ok() ? o.start : !o.body.ok() ? o.body : o.join;
  }
  if (first.ok()) return first;
  return Status(first.code(), "failed ranks:" + all);
}

}  // namespace ferry::ps::testing
