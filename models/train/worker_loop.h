// Internal to models/train: the worker side of RunTraining (trainer.h), shared by
// trainer.cc (the job: setup, the passes, the end), trainer_epochs.cc (the decisions after each
// pass: held-out scores, verdicts, the kept model, the record for resuming, the refit),
// trainer_passes.cc (one pass: the minibatch loops, counting, resuming mid-pass, streaming
// evaluation), trainer_stream.cc (a stream, windows) and trainer_lockstep.cc (a followed
// directory under bsp: each worker its files, resumable).
//
// Ownership: a WorkerLoop borrows the worker, the options and the model definition (they outlive
// it) and owns its readers, display and metrics file. Threading: the worker's thread only.
// Blocking: most steps are collectives over the workers (counting, held-out scores, calibration,
// the end's totals): every worker makes the same sequence of them, and each blocks until all
// have made it.
#pragma once

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/data/field_map.h"
#include "models/data/reader.h"
#include "models/data/stream_dealer.h"
#include "models/eval/metrics_json.h"
#include "models/eval/progress.h"
#include "models/io/export_writer.h"
#include "models/train/early_stop.h"
#include "models/train/epoch_log.h"
#include "models/train/evaluate.h"
#include "models/train/step.h"
#include "models/train/trainer.h"

namespace ferry::models {

using TrainClock = std::chrono::steady_clock;

class WorkerLoop {
 public:
  WorkerLoop(ps::Worker& w, const TrainOptions& o, const ModelDef& def);

  Status Run(TrainReport* report);
  // Worker join slots (dealt files, or a stream rank 0 deals): asked at every batch boundary
  // whether this worker is to leave the job (ps::Node::worker_leave_requested: SIGTERM).
  void SetLeaveCheck(std::function<bool()> asked) { leave_asked_ = std::move(asked); }
  // A stream (StreamTraining): one pass, progressive evaluation per window (trainer_stream.cc).
  Status RunStream(TrainReport* report);

 private:
  enum class Side { kAll, kTraining, kHeldOut };
  // What the job has decided to keep so far.
  struct Kept {
    uint32_t epoch = 0;  // 0: nothing kept yet (the last pass's model is the one)
    EvalMetrics validation;
    EvalMetrics test;   // taken when it was kept, unless it is the last pass
    std::string dir;    // its checkpoint ("" when no model file is written)
    bool ours = true;   // dir was written by this job (not by the run it resumed)
    double offset = 0;  // its intercept calibration (models/eval/calibration.h)
  };

  // Where a resumed job goes on (first_step 0: a fresh job).
  struct ResumePoint {
    uint64_t first_step = 0;    // the batch (bsp clock) the checkpoint was taken at
    bool decide_first = false;  // the pass that ended at the checkpoint still needs its decision
  };

  // --- trainer.cc: the job, one step each: readers, metrics and the counting pass (Setup),
  // resuming, the epochs, then the end: evaluation, reduction, the final record, the export.
  Status Setup();
  // Worker 0's metrics file; the test files are opened once to fail now, not after training.
  Status OpenOutputs();
  // Worker 0 of several: a warning when gzip training files leave workers without data.
  Status WarnIdleWorkers();
  Result<ResumePoint> Resume();
  // The passes until the job decides to stop; returns the last pass's number.
  Result<uint32_t> RunEpochs(const ResumePoint& at);
  void LogStop(uint32_t last_epoch);
  Result<ReaderOptions> ReaderFor(const std::vector<std::string>& files, Side side,
                                  bool sharded) const;
  bool HasHeldOut() const { return held_out_ != nullptr; }
  // The decisions after pass `epoch`: held-out score, verdict, keeping the model. True: stop.
  Result<bool> EndEpoch(uint32_t epoch);
  // Scores the held-out data (every worker its shard; the sums go to all, the AUC's scores to
  // worker 0) and keeps this worker's probabilities for FitOffset.
  Result<EvalMetrics> ScoreHeldOut();
  // The logit offset that calibrates the last held-out scores (every worker the same); 0
  // without calibration.
  Result<double> FitOffset();
  // Scores the test files with the model on the servers (every worker its shard); the merged
  // metrics on worker 0.
  Result<EvalMetrics> ScoreTest();
  Status Keep(uint32_t epoch, const EvalMetrics& validation, bool last);
  std::string KeptDir(uint32_t epoch) const;
  Status RecordEpoch(const EpochEntry& entry);
  // A job resumed from a periodic checkpoint at `clock`: the record of the passes before it.
  // Returns whether the pass that ended exactly at the checkpoint still needs its decision.
  Result<bool> RestoreEpochs(uint64_t clock);
  // After automatic passes on a held-out fraction: a fresh model trained on every line for the
  // kept pass count (TrainOptions::refit).
  Status Refit();
  Status Finish(uint32_t last_epoch, TrainReport* report);
  // The exported model's calibration: the kept one's, or after a refit of a dense or short model
  // its own (a collective: every worker calls it).
  Result<double> FinalOffset();
  // Every worker's totals, all-gathered to worker 0: the report there (without the test figures
  // and the offset), nullopt on the others.
  Result<std::optional<TrainReport>> Reduce(uint32_t last_epoch, double train_seconds);
  // Worker 0: the progress display's last line and the "final" metrics line.
  Status WriteFinalRecord(const TrainReport& rep, uint32_t last_epoch);
  // Worker 0: the model file (the servers' model when `current`, else the kept checkpoint), then
  // the kept checkpoint goes unless it is the job's to keep.
  Status ExportKept(bool current);
  Status Export(const std::string& from_dir);
  void Log(const std::string& line);

  // --- trainer_export.cc: the export directory (--export-dir), worker 0 only.
  Status OpenExportDir();
  // asp: a version when one is due (--export-every), worker 0 alone; call between batches or
  // after a window's round. Nothing on the other workers.
  Status MaybeExport();
  // bsp/ssp: every worker after its Clock() of `clock` (1, 2, ... over the whole job); a
  // collective when a version is due (worker 0 takes it, the others wait in a Barrier).
  Status MaybeExportAtClock(uint64_t clock);
  // The next version from the checkpoint `from_dir`, or ("") from a checkpoint taken now.
  Status TakeVersion(const std::string& from_dir);
  // The samples behind the model now (all workers): what --export-every counts.
  uint64_t ExportSamples() const;
  // The exported model's parameters (--model-out and the export directory's versions).
  ModelParams ExportParams() const;

  // --- trainer_passes.cc: one pass.
  // Dealt training: the batches of this worker's items of the pass, one clock each (bsp/ssp).
  Status TrainDealt(uint32_t epoch);
  // Worker join slots: true once this worker stops taking items (a stream: asked its dealer to
  // stop dealing to it) to leave the job (SIGTERM; never worker 0, which writes the model).
  bool Leaving();
  // This worker's totals to the others (ps::Worker::Leave's farewell), and out.
  Status LeaveJob();
  // A worker join slot says it took part (stderr).
  void SayJoined() const;
  // Worker join slots: the workers change while the job runs, so worker 0 scores every test
  // line and the others none.
  bool TestOnLead() const { return o_.worker_join_slots > 0; }
  Status CountSteps(bool share);
  Result<uint64_t> SeekToCheckpoint();
  Status TrainSequential(uint32_t epoch, uint64_t first_step);
  // Backup workers: FERRY_TEST_SLOW_WORKER=W:F makes worker W sleep F - 1 times each batch's
  // own time (Straggle); ReportSkipped says which batches this worker skipped.
  Status ReadStraggler();
  void Straggle(TrainClock::time_point began);
  void ReportSkipped() const;
  Status TrainPipelined(uint32_t epoch);
  void Account(double loss, size_t n);
  Status MaybeEvaluate(uint32_t epoch);
  Status LoadEvalSet();
  Status EvaluateStream(uint32_t epoch);
  void ShowProgress();

  // --- trainer_stream.cc: continuous training.
  Status SetupStream();
  uint64_t WindowSamples() const;
  Status TrainStream();
  // A trained batch's loss and its probabilities (scored before the push) into the window.
  void AddToWindow(const Batch& b, double loss, const std::vector<float>& probs);
  // One round of the window collectives (every worker calls it alike); true once every worker
  // has reached the end of its input.
  Result<bool> CloseWindow(bool at_end);
  // Whether every worker is at the end of its input (an all-gather: every worker calls it alike).
  Result<bool> AllEnded(bool at_end);
  // Worker 0: the merged window of `seconds`, printed and written to the metrics file.
  Status ReportWindow(const std::vector<std::vector<uint8_t>>& parts, double seconds);
  // Worker 0: per table (table.NAME.rows, .admitted, .evicted, .refused since the last window,
  // .bytes) and in all (rows, bytes_resident), from the servers' counters; returns the rows.
  Result<uint64_t> AddTableStats(MetricsLine* line);

  // --- trainer_lockstep.cc: a followed directory under bsp (auto_settings.h LockstepStream).
  // Starts this worker's dealer over its files of the directory; returns the path of the pipe
  // it writes (the reader's input).
  Result<std::string> StartOwnShare();
  // One batch per clock until every worker is at its end; a resumed job first reads its way to
  // the checkpoint's clock.
  Status TrainLockstep();
  Result<uint64_t> SeekLockstep();
  // A checkpoint at the end of a clean stop (an empty clock that asks for it), unless `clock`
  // (the clocks made) has one already or none are asked for.
  Status CheckpointAtEnd(uint64_t clock);
  // Next(want) of the reader; at the end (0) the dealer's error if it failed.
  Result<size_t> NextOwn(Batch* b, size_t want);

  ps::Worker& w_;
  const TrainOptions& o_;
  const ModelDef& def_;
  Stepper step_;
  bool lead_;
  std::shared_ptr<const FieldMap> field_map_;
  std::unique_ptr<Reader> reader_;    // this worker's training shard
  std::unique_ptr<Reader> held_out_;  // this worker's held-out shard (null: none)
  uint64_t held_out_passes_ = 0;
  uint64_t held_out_malformed_ = 0;               // lines of the held-out side skipped as malformed
  std::vector<float> held_scores_, held_labels_;  // this worker's last held-out scores
  double offset_ = 0;                             // the exported model's calibration
  EarlyStopping stopper_;
  Kept kept_;
  std::string superseded_;          // the kept model's checkpoint a better one replaced (worker 0)
  std::vector<EpochEntry> epochs_;  // the record of finished passes (worker 0)
  std::string stop_reason_;
  bool refitted_ = false;
  bool refitting_ = false;        // the refit's passes: no export-directory versions
  uint64_t steps_per_epoch_ = 0;  // bsp/ssp
  uint64_t my_samples_ = 0;       // this worker's shard, one epoch (bsp/ssp)
  uint64_t position_ = 0;         // samples read since the start of the training, all epochs
  uint64_t total_samples_ = 0;    // all workers, one epoch (0: unknown)
  uint64_t batches_ = 0;          // this worker's batches so far
  uint64_t samples_ = 0;          // this worker's trained samples so far
  // Backup workers: batches whose clocks the job completed without this worker, still to skip,
  // and those skipped so far; the slowdown FERRY_TEST_SLOW_WORKER gives this worker (0: none).
  uint64_t clocks_to_skip_ = 0;
  uint64_t skipped_batches_ = 0, skipped_samples_ = 0;
  double straggle_factor_ = 0;
  double loss_sum_ = 0;
  double epoch_loss_ = 0;  // this pass
  uint64_t epoch_n_ = 0;
  double recent_loss_ = 0;  // since the last streaming evaluation
  uint64_t recent_n_ = 0;
  double ema_loss_ = std::nan("");
  double last_auc_ = std::nan("");
  TrainClock::time_point start_ = TrainClock::now();
  std::unique_ptr<ProgressDisplay> progress_;
  std::optional<MetricsJsonWriter> metrics_;
  std::vector<Batch> eval_set_;
  // Continuous training: this window's scores (each sample before its push), its start, and
  // worker 0's count of windows and of their samples; samples this worker read.
  EvalPart window_;
  TrainClock::time_point window_start_ = TrainClock::now();
  uint64_t windows_ = 0;
  uint64_t window_total_ = 0;
  uint64_t read_ = 0;
  // Lockstep: this worker's dealer and the read end of its pipe; the checkpoint's clock the job
  // resumed from (0: a fresh job); whether the reader reached the end of the worker's files.
  std::unique_ptr<StreamDealer> own_dealer_;
  Fd own_share_;
  uint64_t resumed_clock_ = 0;
  bool own_ended_ = false;
  std::vector<ps::TableStats> last_table_stats_;  // worker 0: at the last window
  // Dealt training (auto_settings.h DealtTraining): the items of a pass, whether this worker
  // stopped taking them to leave, and what asks it to.
  const bool dealt_;
  uint32_t deal_items_ = 0;
  bool leaving_ = false;
  bool refused_leave_ = false;  // worker 0 said once that it stays
  std::function<bool()> leave_asked_;
  // Worker 0 with --export-dir: the writer, the last version's time, the sample count that makes
  // the next one due, and the time spent exporting.
  std::optional<ExportDirWriter> exporter_;
  TrainClock::time_point last_export_ = TrainClock::now();
  uint64_t next_export_samples_ = 0;
  double export_ms_ = 0;
};

double SecondsSince(TrainClock::time_point since);
// snprintf of one number, for log lines.
std::string Figure(const char* fmt, double v);

}  // namespace ferry::models
