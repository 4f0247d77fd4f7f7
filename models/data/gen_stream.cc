// GenerateStream(): the training stream to a file descriptor, paced, ending quietly on EPIPE.
//
// Pacing is a schedule, not a per-sample sleep: sample i is due at start + i / rate, so rounding
// in one sleep is made up by the next and the rate is exact over any second. Sleeping only when
// more than kMinSleep ahead keeps it to at most 1000 sleeps (and flushes) a second whatever the
// rate; a writer that fell behind (the reader stalled) catches up at full speed, but by no more
// than kMaxLag: older debt is forgiven, as a token bucket one second deep would.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "models/data/gen_internal.h"

namespace ferry::models {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFlushBytes = 1 << 20;
constexpr auto kMinSleep = std::chrono::milliseconds(1);
constexpr auto kMaxLag = std::chrono::seconds(1);

// Writes and empties *buffer. EPIPE: *closed = true and Ok (the reader went away).
Status WriteAll(int fd, std::string* buffer, bool* closed) {
  size_t done = 0;
  while (done < buffer->size()) {
    const ssize_t n = ::write(fd, buffer->data() + done, buffer->size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) {
        *closed = true;
        break;
      }
      return IoError("write the stream (fd " + std::to_string(fd) + ")", errno);
    }
    done += static_cast<size_t>(n);
  }
  buffer->clear();
  return Status::Ok();
}

}  // namespace

Result<GenStreamSummary> GenerateStream(const GenOptions& options, const GenStreamOptions& stream) {
  if (!(stream.rate >= 0) || stream.rate > 1e9) {
    return InvalidArgument("--rate must be a positive number of samples per second (at most 1e9)");
  }
  if (options.gzip) return InvalidArgument("--stream writes plain text: pipe it through gzip");
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Generator> gen, Generator::Create(options));
  if (!options.truth_out.empty()) {
    if (options.drift > 0) {
      return InvalidArgument("--drift has no --truth-out: the truth changes every epoch");
    }
    FERRY_RETURN_IF_ERROR(gen->WriteTruth(options.truth_out));
  }
  GenStreamSummary sum;
  std::string buffer;
  buffer.reserve(kFlushBytes + (64 << 10));
  GenSample s;
  Clock::time_point start = Clock::now();
  uint64_t since_start = 0;  // samples scheduled from `start`
  const auto due = [&](uint64_t i) {
    return start + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(static_cast<double>(i) / stream.rate));
  };
  for (uint64_t i = 0; stream.samples == 0 || i < stream.samples; ++i, ++since_start) {
    if (stream.rate > 0) {
      const Clock::time_point now = Clock::now(), at = due(since_start);
      if (at > now + kMinSleep) {
        // Whatever is written is due: out it goes before the pause, so a slow stream flows.
        FERRY_RETURN_IF_ERROR(WriteAll(stream.fd, &buffer, &sum.reader_closed));
        if (sum.reader_closed) return sum;
        sum.samples = i;
        std::this_thread::sleep_until(at);
      } else if (at + kMaxLag < now) {
        start = now;  // forgive the debt beyond one second
        since_start = 0;
      }
    }
    gen->NextTrain(&s);
    gen->AppendLine(s, &buffer);
    if (buffer.size() >= kFlushBytes) {
      FERRY_RETURN_IF_ERROR(WriteAll(stream.fd, &buffer, &sum.reader_closed));
      if (sum.reader_closed) return sum;
      sum.samples = i + 1;
    }
  }
  FERRY_RETURN_IF_ERROR(WriteAll(stream.fd, &buffer, &sum.reader_closed));
  if (!sum.reader_closed) sum.samples = stream.samples;
  return sum;
}

}  // namespace ferry::models
