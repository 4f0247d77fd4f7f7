// ferry-train's local cluster over a stream (--train - or a FIFO, --follow DIR or FILE:
// models/data/stream_input.h): the launching process owns
// the stream and deals it to the workers (models/data/stream_dealer.h), each worker reading its
// share on its standard input (FERRY_TRAIN_STREAM=dealt tells it so).
//
// The end: the stream's end, --max-samples lines (cut by the dealer, so exact over all workers)
// or --idle-exit seconds without input end the stream for every worker, which then finish as
// usual (final evaluation, export). The first SIGINT, SIGTERM or SIGHUP does the same (the
// ranks are not signalled: the job ends cleanly with the samples read so far); a second one
// stops the ranks as ferry-launch does.
//
// Resuming: a stream is not re-read, so a job killed mid-stream that is started again goes on
// with what the stream gives next (at most once for the samples in flight at the kill).
//
// Thread-safety: the main thread; blocks until the job is over.
#pragma once

#include "models/data/stream_dealer.h"
#include "models/train/train_options.h"
#include "ps/launch/local_cluster.h"

namespace ferry::train {

// Pipe capacity asked for a worker's share on one host (the local cluster's pipes, colocated
// rank 0's own worker): a few blocks in flight keep a worker busy while the dealer serves the
// others (the kernel may grant less; 64 KiB still works, only with more wake-ups).
inline constexpr int kStreamPipeBytes = 1 << 20;

// The dealer's options for o's stream: its input (--train, or --follow DIR or FILE), --max-samples
// and --idle-exit; no sinks yet.
models::DealerOptions StreamDealerOptions(const models::TrainOptions& o);

// After the dealer's Join: "ferry-train: the stream gave N lines (why; where)" on stderr unless
// o.quiet, then its error, if any. Returns `job_code`, or 1 when the job succeeded but the
// dealing failed.
int ReportDealtStream(const models::TrainOptions& o, const models::StreamDealer& dealer,
                      const Status& dealt, int job_code);

// Runs the job of `lc` (its argv, shape, transport) with the stream o.train_files[0] dealt to
// its workers; the launcher's exit code, as RunLocalCluster's.
Result<int> RunStreamingLocalCluster(const models::TrainOptions& o, ps::LocalClusterOptions lc);

// Runs the job of `lc` whose workers follow a directory in lockstep (models/train/auto_settings.h
// LockstepStream): nothing is dealt; the first SIGINT, SIGTERM or SIGHUP tells every worker to
// stop following (FERRY_TRAIN_STREAM=stop-on-stdin: its standard input, a pipe from this
// process, ends), so the job ends cleanly with what each worker read (final evaluation, export);
// a second one stops the ranks.
Result<int> RunLockstepLocalCluster(ps::LocalClusterOptions lc);

}  // namespace ferry::train
