// A followed directory or file trained in lockstep (auto_settings.h LockstepStream: --follow DIR
// or FILE with --consistency bsp), the stream a checkpoint can resume exactly once.
//
// Why no dealer here: a dealer gives blocks to whichever worker has room, so which lines a worker
// trained by clock C depends on timing, and a checkpoint's clock would not say where the stream
// stands. Here every worker follows DIR itself and takes every W-th file in name order
// (stream_input.h FollowShare) through a dealer of its own with one sink (its reader's pipe),
// one batch per clock; a tailed FILE is read whole by every worker, which keeps the lines of
// every W-th block of a batch of lines (FollowShare::block_lines). The lines behind clock C are
// then a function of the files alone: a resumed worker reads its files again from the start up
// to the sample count it recorded at the checkpoint and goes on; the model is the uninterrupted
// run's, bit for bit.
//
// The end. A worker at the end of its files (the dealer's --idle-exit) goes on making empty
// clocks; every window's round (every ceil(window / (batch x workers)) clocks, the same clock on
// every worker) and every kEndCheckClocks clocks between them ask who is at the end, and the job
// ends once all are. With --checkpoint-dir, one more (empty) clock asks for a checkpoint there
// (CheckpointAtEnd): a stopped job resumes where it stopped.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "models/train/auto_settings.h"
#include "models/train/worker_loop.h"

namespace ferry::models {

namespace {

// As for the workers' pipes on a dealt stream (tools/train/stream_launch.cc): a few blocks in
// flight keep the parser busy while the dealer opens the next file.
constexpr int kOwnPipeBytes = 1 << 20;
// Clocks between two checks whether every worker is at its end: an all-gather of one flag, next
// to the clock's own barrier.
constexpr uint64_t kEndCheckClocks = 16;

}  // namespace

Result<std::string> WorkerLoop::StartOwnShare() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe for this worker's files", errno);
  (void)::fcntl(fds[1], F_SETPIPE_SZ, kOwnPipeBytes);
  own_share_ = Fd(fds[0]);
  DealerOptions d;
  d.input = o_.stream.follow;
  struct stat st;
  const bool dir = ::stat(d.input.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  d.follow = dir ? FollowMode::kDir : FollowMode::kTail;
  // A tailed file: every worker reads it whole and keeps its batches' lines (blocks of a batch,
  // every W-th): the lines behind a clock are again a function of the file alone.
  d.share = FollowShare{w_.index(), w_.num_workers(), o_.batch_size};
  d.sinks = {fds[1]};
  d.idle_exit_seconds = o_.stream.idle_exit_seconds;
  if (StreamStopOnStdin()) {
    // The launcher's word to stop following: the end of this standard input (its first Ctrl-C).
    d.stop_fd = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
    if (d.stop_fd < 0) {
      ::close(fds[1]);
      return IoError("duplicate stdin (the launcher's stop pipe)", errno);
    }
  }
  FERRY_ASSIGN_OR_RETURN(own_dealer_, StreamDealer::Start(std::move(d)));
  // The reader opens the pipe again by name (a stream input: read once, never rewound).
  return "/dev/fd/" + std::to_string(own_share_.get());
}

Result<size_t> WorkerLoop::NextOwn(Batch* b, size_t want) {
  b->Clear();
  FERRY_ASSIGN_OR_RETURN(const size_t n, reader_->Next(want, b));
  if (n > 0 || own_ended_) return n;
  // The pipe ended: the dealer stopped, by --idle-exit, a stop from the launcher or because it
  // failed (a file that could not be read, one that arrived out of name order): the last fails
  // the job, it is no end.
  own_ended_ = true;
  FERRY_RETURN_IF_ERROR(own_dealer_->Join());
  const DealerStats& st = own_dealer_->stats();
  Log("ferry-train: worker " + std::to_string(w_.index()) + "'s files of " + o_.stream.follow +
      " gave " + std::to_string(st.lines) + " lines (" + st.end + "; " + st.where + ")");
  return n;
}

Result<uint64_t> WorkerLoop::SeekLockstep() {
  if (!w_.restored() || !w_.restored()->position) return uint64_t{0};
  const ps::Worker::Restored& r = *w_.restored();
  // By samples, not clocks: a worker whose files ended (or whose job was stopped) before the
  // checkpoint made empty clocks after its last batch. Its batches before were whole, so the
  // sample count alone says which lines it had trained.
  Batch b;
  while (position_ < *r.position && !own_ended_) {
    const uint64_t left = *r.position - position_;
    FERRY_ASSIGN_OR_RETURN(
        const size_t n, NextOwn(&b, static_cast<size_t>(std::min<uint64_t>(o_.batch_size, left))));
    position_ += n;
  }
  if (position_ != *r.position) {
    return InvalidArgument(
        "worker " + std::to_string(w_.index()) + " had read " + std::to_string(*r.position) +
        " samples of its files of " + o_.stream.follow + " at the checkpoint's clock " +
        std::to_string(r.clock) + ", but they give only " + std::to_string(position_) +
        " (files removed or changed since, or other --workers than the run that wrote it?)");
  }
  Log("ferry-train: resumed at clock " + std::to_string(r.clock) + " of " + o_.stream.follow);
  return r.clock;
}

Status WorkerLoop::TrainLockstep() {
  FERRY_ASSIGN_OR_RETURN(uint64_t clock, SeekLockstep());
  resumed_clock_ = clock;
  const uint64_t per_clock = uint64_t{o_.batch_size} * w_.num_workers();
  const uint64_t round = std::max<uint64_t>(1, (WindowSamples() + per_clock - 1) / per_clock);
  Batch batch;
  Stepper::Slot slot;
  std::vector<float> probs;
  while (true) {
    size_t n = 0;
    if (!own_ended_) {
      FERRY_ASSIGN_OR_RETURN(n, NextOwn(&batch, o_.batch_size));
    }
    position_ += n;
    if (n > 0) {
      FERRY_RETURN_IF_ERROR(step_.Begin(batch, &slot, Stepper::Use::kTrain));
      FERRY_ASSIGN_OR_RETURN(const double loss, step_.Finish(&slot, true, &probs));
      AddToWindow(batch, loss, probs);
    }
    // An empty clock still counts: every worker makes the same clocks.
    FERRY_RETURN_IF_ERROR(w_.Clock(position_));
    ++clock;
    FERRY_RETURN_IF_ERROR(MaybeExportAtClock(clock));
    if (clock % round == 0) {
      FERRY_ASSIGN_OR_RETURN(const bool all_ended, CloseWindow(own_ended_));
      if (all_ended) break;
    } else if (clock % kEndCheckClocks == 0) {
      // Between windows too, or workers at their end would make up to a window of empty clocks.
      FERRY_ASSIGN_OR_RETURN(const bool all_ended, AllEnded(own_ended_));
      if (all_ended) {
        // Every worker knows: the last, partial window closes everywhere.
        FERRY_RETURN_IF_ERROR(CloseWindow(/*at_end=*/true).status());
        break;
      }
    }
    ShowProgress();
  }
  return CheckpointAtEnd(clock);
}

Status WorkerLoop::CheckpointAtEnd(uint64_t clock) {
  // The job ends cleanly here (every worker at the end of its files, or stopped by the
  // launcher): one more clock, empty on every worker, asks the coordinator for a checkpoint with
  // every worker's position, so a --resume goes on from the end of this run and not from the
  // last periodic checkpoint (whose later files it would train again, to the same model). Every
  // worker decides alike: the end is known to all at the same clock.
  const ps::JobSpec& job = w_.job();
  if (job.checkpoint_dir.empty() || job.checkpoint_every == 0 ||
      clock % job.checkpoint_every == 0) {
    return Status::Ok();  // none asked for, or the last clock has one already
  }
  FERRY_RETURN_IF_ERROR(w_.Clock(position_, /*checkpoint=*/true));
  Log("ferry-train: checkpoint of the stream's end at clock " + std::to_string(clock + 1) + " in " +
      job.checkpoint_dir);
  return Status::Ok();
}

}  // namespace ferry::models
