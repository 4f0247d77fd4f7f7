#include "tools/train/stream_launch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "models/data/stream_dealer.h"
#include "models/train/auto_settings.h"

namespace ferry::train {

models::DealerOptions StreamDealerOptions(const models::TrainOptions& o) {
  models::DealerOptions d;
  d.input = o.train_files.front();
  if (!o.stream.follow.empty()) {
    struct stat st;
    const bool dir = ::stat(o.stream.follow.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    d.follow = dir ? models::FollowMode::kDir : models::FollowMode::kTail;
  }
  d.max_lines = o.stream.max_samples;
  d.idle_exit_seconds = o.stream.idle_exit_seconds;
  return d;
}

int ReportDealtStream(const models::TrainOptions& o, const models::StreamDealer& dealer,
                      const Status& dealt, int job_code) {
  const models::DealerStats& st = dealer.stats();
  if (!o.quiet) {
    // Spliced blocks are not read (stream_splice.h): their lines are counted by the workers
    // (the job's "samples"), the stream by its bytes.
    const std::string size = st.spliced_bytes > 0 ? std::to_string(st.bytes) + " bytes"
                                                  : std::to_string(st.lines) + " lines";
    // Workers that joined or left while it ran: what each was dealt (the workers in order,
    // then those that joined, in the order they came).
    std::string shares;
    if (st.sinks_added > 0 || st.sinks_left > 0) {
      shares = "; lines per worker:";
      for (size_t i = 0; i < st.lines_per_sink.size(); ++i) {
        shares += (i == 0 ? " " : ", ") + std::to_string(st.lines_per_sink[i]);
      }
      shares += " (" + std::to_string(st.sinks_added) + " joined, " +
                std::to_string(st.sinks_left) + " left)";
    }
    std::fprintf(stderr, "ferry-train: the stream gave %s (%s; %s)%s%s\n", size.c_str(),
                 st.end.c_str(), st.where.c_str(), shares.c_str(),
                 st.lost_bytes > 0 ? "; some were dealt to a worker that had stopped" : "");
  }
  if (dealt.ok()) return job_code;
  std::fprintf(stderr, "ferry-train: %s\n", dealt.ToString().c_str());
  return job_code == 0 ? 1 : job_code;
}

Result<int> RunStreamingLocalCluster(const models::TrainOptions& o, ps::LocalClusterOptions lc) {
  std::vector<models::Fd> read_ends;
  models::DealerOptions d = StreamDealerOptions(o);
  for (uint32_t w = 0; w < lc.workers; ++w) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      for (int fd : d.sinks) ::close(fd);
      return IoError("pipe for worker " + std::to_string(w) + "'s share of the stream", errno);
    }
    (void)::fcntl(fds[1], F_SETPIPE_SZ, kStreamPipeBytes);
    read_ends.emplace_back(fds[0]);
    d.sinks.push_back(fds[1]);
    lc.worker_stdin.push_back(fds[0]);
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<models::StreamDealer> dealer,
                         models::StreamDealer::Start(std::move(d)));
  lc.env.emplace_back(models::kStreamDealtEnv, "dealt");
  models::StreamDealer* raw = dealer.get();
  lc.intercept_signal = [raw](int) {
    raw->Stop();
    return true;
  };
  Result<int> rc = ps::RunLocalCluster(lc);
  // The job is over (or failed to start): nothing reads the shares any more.
  read_ends.clear();
  raw->Stop();
  Status dealt = dealer->Join();
  const int code = ReportDealtStream(o, *dealer, dealt, rc.ok() ? *rc : 1);
  if (!rc.ok()) return rc;
  return code;
}

Result<int> RunLockstepLocalCluster(ps::LocalClusterOptions lc) {
  // Each worker's standard input is a pipe that only this process writes to: closing the write
  // ends at the first signal is the workers' word to stop following (their dealers' stop_fd).
  std::vector<models::Fd> read_ends, write_ends;
  for (uint32_t w = 0; w < lc.workers; ++w) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe for worker " + std::to_string(w), errno);
    read_ends.emplace_back(fds[0]);
    write_ends.emplace_back(fds[1]);
    lc.worker_stdin.push_back(fds[0]);
  }
  lc.env.emplace_back(models::kStreamDealtEnv, models::kStreamStopOnStdin);
  lc.intercept_signal = [&write_ends](int) {
    write_ends.clear();
    return true;
  };
  return ps::RunLocalCluster(lc);
}

}  // namespace ferry::train
