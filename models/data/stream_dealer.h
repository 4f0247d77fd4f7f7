// StreamDealer: reads one unbounded stream of lines (standard input or a named pipe) and deals it,
// in blocks of whole lines, to several sinks: on a local cluster, the pipes that are the workers'
// standard input (tools/train/cli.cc), so W workers train on one stream.
//
// The input (stream_input.h): a pipe, a followed directory or a tailed file.
//
// Dealing. A block is at most block_bytes of whole lines (a longer line is one block of its
// own). Each block goes whole to one sink, so every line reaches exactly one worker and the
// lines a worker gets keep their order in the stream. A block goes to a sink with nothing
// waiting, taken round-robin: a worker that reads slower keeps its pipe full and is skipped, so
// blocks go where they are consumed and no worker waits while another holds a backlog.
//
// Splicing. When the input is a pipe, a block moves from it into a sink without being copied
// (splice(2); stream_splice.h: only the last 16 KiB of each block are read, to cut it after a
// line), to a free sink whose pipe has room for it; the dealer's read buffer is used only for
// what splicing cannot cut (a line longer than that at a block's end, a line still arriving),
// and reads into it end at a line end, so splicing resumes once it is dealt.
//
// The end. The stream ends, for every sink, when the input ends (EOF: the last writer closed the
// pipe), after max_lines lines (cut exactly there), after idle_exit_seconds without an input
// byte, or at Stop() (the launcher's SIGINT/SIGTERM). What was read is dealt and flushed, then
// every sink is closed: the workers see the end of their input and finish their job. A line the
// input ends without '\n' is given one; the start of a line the stream stopped inside (Stop,
// idle) is dropped (unfinished_bytes), unless a longer-than-the-buffer line is under way. A sink
// whose reader is gone (EPIPE) is dropped and its unwritten bytes counted as lost (its worker
// died; the launcher stops the job).
//
// Sinks that come and go (DealerOptions::open: workers joining and leaving an elastic job). A
// sink added while the dealer runs (AddSink) takes blocks from then on; one added after the
// stream ended is closed at once (its reader sees an empty share). A sink that is a socket is
// read too: its peer shutting down its writing side (StopDealingTo), or sending anything, is
// its word to go: it gets no more blocks and is closed once the block it holds is written, so
// its reader sees the end of its share after every byte it was dealt, and the rest of the
// stream goes to the others.
//
// Threading: Start() runs the dealing on a thread of its own; Stop(), AddSink() and ended() may
// be called from any thread, any number of times; Join() once, from the thread that called
// Start. Memory: the read buffer (read_bytes) plus at most one block per sink.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "models/data/input.h"
#include "models/data/stream_input.h"
#include "transport/status.h"

namespace ferry::models {

struct DealerOptions {
  std::string input = "-";  // "-" (stdin) or a path that IsStreamInput; with follow, DIR or FILE
  FollowMode follow = FollowMode::kNone;  // stream_input.h
  FollowShare share;                      // kDir: the files this dealer takes (stream_input.h)
  std::vector<int> sinks;  // write ends, owned by the dealer from Start on (closed at the end)
  size_t block_bytes = 256 << 10;
  size_t read_bytes = 4 << 20;   // read buffer; lines longer than it go out in pieces, to one sink
  uint64_t max_lines = 0;        // 0: no limit
  double idle_exit_seconds = 0;  // 0: wait for input for ever
  // A descriptor that ends the input (as Stop() does) once it is readable or hung up: a pipe
  // whose writer, the launcher, closes it at its first SIGINT. Owned by the dealer from Start
  // on; -1: none.
  int stop_fd = -1;
  // A pipe input's blocks move into the sinks (pipes) by splice(2) (stream_splice.h) instead of
  // being read and written, unless max_lines is set (it counts lines, which splicing does not
  // see) or block_bytes < kMinSpliceBlock. false: every byte is read and written (tests compare
  // both ways).
  bool splice = true;
  // Sinks may come (AddSink) and go (a socket sink's word, above) while the dealer runs; blocks
  // are then copied, never spliced.
  bool open = false;
};

// Smaller blocks are copied: a spliced block takes a slot of its sink's pipe per page it
// touches, so small ones fill a pipe's slots long before its bytes, and a worker that is not
// scheduled for a moment would find its pipe drained sooner (the others get its share).
inline constexpr size_t kMinSpliceBlock = 64 << 10;
// Nor is a stream spliced into sinks whose pipes hold less (F_GETPIPE_SZ): splicing keeps nothing
// in the dealer, so the workers' pipes are all that stands between them and a writer that is not
// scheduled for a moment. Copying keeps the read buffer (read_bytes) full ahead of them instead.
// The launcher's pipes are 1 MiB (tools/train/stream_launch.h).
inline constexpr size_t kMinSplicePipe = 512 << 10;

struct DealerStats {
  uint64_t lines = 0;  // lines dealt by copying ('\n' written, the one added at the end included)
  uint64_t bytes = 0;  // bytes dealt
  uint64_t spliced_bytes = 0;  // of `bytes`: spliced, whose lines are not counted (not in `lines`)
  std::vector<uint64_t> lines_per_sink;  // by copying; sinks added later after the first ones
  uint32_t sinks_added = 0;              // by AddSink
  uint32_t sinks_left = 0;               // closed early at their reader's word
  uint64_t lost_bytes = 0;               // dealt to a sink that closed before taking them
  uint64_t unfinished_bytes = 0;         // the start of a line the stream stopped inside
  // Why the stream ended: "end of input", "--max-samples", "idle", "stopped".
  std::string end;
  std::string where;  // where the input stood (StreamInput::Where)
};

// The end of the next block in data[0, n): the end of the last whole line within max_bytes, or
// of the first line if it alone is longer; at most lines_left lines (> 0). *lines gets the
// lines in it. 0 when data holds no '\n' (a line still coming). Pure.
size_t NextBlockEnd(std::string_view data, size_t max_bytes, uint64_t lines_left, uint64_t* lines);

// A reader's word to the dealer of its share over the socket `fd` (DealerOptions::open): no more
// blocks; it then reads `fd` to its end. Shuts down the socket's writing side.
// kInvalidArgument when `fd` is no socket (a pipe cannot carry the word back).
Status StopDealingTo(int fd);

class StreamDealer {
 public:
  // Opens nothing on the caller's thread (a FIFO's open waits for a writer): the dealing thread
  // opens the input. Sinks are made non-blocking.
  static Result<std::unique_ptr<StreamDealer>> Start(DealerOptions options);
  ~StreamDealer();  // Stop() and Join() if the owner did not
  StreamDealer(const StreamDealer&) = delete;
  StreamDealer& operator=(const StreamDealer&) = delete;

  void Stop();
  // DealerOptions::open: one more sink (a write end, owned by the dealer from now on), dealt to
  // from its next block; closed at once when the stream has ended. Index: the next of `sinks`.
  void AddSink(Fd sink);
  // Whether the input has ended (for any reason): nothing more is read. Once true, stays true.
  bool ended() const { return ended_->load(); }
  // The same, for a caller that may outlive the dealer.
  std::shared_ptr<const std::atomic<bool>> ended_flag() const { return ended_; }
  // Waits for the end; the error if the input failed (the sinks are closed either way).
  Status Join();
  // After Join.
  const DealerStats& stats() const { return stats_; }

 private:
  explicit StreamDealer(DealerOptions options);
  Status Run();

  DealerOptions o_;
  DealerStats stats_;
  Fd wake_;     // eventfd: Stop() wakes the poll
  Fd stop_fd_;  // DealerOptions::stop_fd
  std::atomic<bool> stop_{false};
  std::shared_ptr<std::atomic<bool>> ended_ = std::make_shared<std::atomic<bool>>(false);
  std::mutex add_mu_;
  std::vector<Fd> added_;  // AddSink's, for the dealing thread to take
  bool finished_ = false;  // under add_mu_: Run returned (AddSink closes its sink)
  Status result_;
  std::thread thread_;
  bool joined_ = false;
};

}  // namespace ferry::models
