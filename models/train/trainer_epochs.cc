// The decisions after each pass (worker_loop.h): scoring the held-out data, the early-stopping
// verdict, keeping the best model (its test figures, its checkpoint, its calibration), the record
// a resumed job replays, and the refit on every line.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "models/eval/calibration.h"
#include "models/train/gather_sums.h"
#include "models/train/worker_loop.h"
#include "ps/job/checkpoint.h"

namespace ferry::models {

namespace {

// Held-out scores a worker sends to worker 0 for the AUC (8 bytes each, over the control
// plane); a larger shard reports its logloss and calibration only.
constexpr uint64_t kMaxHeldOutScores = uint64_t{1} << 22;

}  // namespace

Result<EvalMetrics> WorkerLoop::ScoreHeldOut() {
  // The first pass reports the held-out side's malformed lines (a rewound reader does not).
  if (held_out_passes_++ > 0) FERRY_RETURN_IF_ERROR(held_out_->Rewind());
  EvalPart mine;
  FERRY_RETURN_IF_ERROR(ScoreShard(step_, *held_out_, o_.batch_size, /*keep_scores=*/true, &mine));
  if (held_out_passes_ == 1) held_out_malformed_ = held_out_->stats().malformed;
  // Everyone needs the loss (the same verdict on every worker): the sums go to all. Only
  // worker 0 reports the AUC: the scores go to it alone, when there are not too many.
  EvalPart sums = mine;
  sums.scores.clear();
  sums.labels.clear();
  FERRY_ASSIGN_OR_RETURN(auto all, w_.GatherFromWorkers(sums.Encode(), /*to_all=*/true));
  FERRY_ASSIGN_OR_RETURN(EvalMetrics m, MergeParts(all));
  if (mine.count > kMaxHeldOutScores) {
    mine.scores.resize(kMaxHeldOutScores);  // the first ones calibrate
    mine.labels.resize(kMaxHeldOutScores);
    held_scores_ = mine.scores;
    held_labels_ = mine.labels;
    mine.scores.clear();
    mine.labels.clear();
  } else {
    held_scores_ = mine.scores;
    held_labels_ = mine.labels;
  }
  FERRY_ASSIGN_OR_RETURN(auto parts, w_.GatherFromWorkers(mine.Encode(), /*to_all=*/false));
  if (lead_) {
    FERRY_ASSIGN_OR_RETURN(EvalMetrics with_auc, MergeParts(parts));
    m.auc = with_auc.auc;
  }
  return m;
}

Result<EvalMetrics> WorkerLoop::ScoreTest() {
  EvalPart mine;
  // With worker join slots worker 0 scores every test line (ReaderFor); the others send nothing.
  if (!o_.test_files.empty() && (!TestOnLead() || lead_)) {
    FERRY_ASSIGN_OR_RETURN(ReaderOptions t, ReaderFor(o_.test_files, Side::kAll, true));
    FERRY_ASSIGN_OR_RETURN(auto r, Reader::Open(t));
    FERRY_RETURN_IF_ERROR(ScoreShard(step_, *r, o_.batch_size, /*keep_scores=*/true, &mine));
  }
  FERRY_ASSIGN_OR_RETURN(auto parts, w_.GatherFromWorkers(mine.Encode(), /*to_all=*/false));
  if (!lead_) return EvalMetrics();
  return MergeParts(parts);
}

Result<double> WorkerLoop::FitOffset() {
  if (!o_.calibrate || !HasHeldOut()) return 0.0;
  // Newton on the held-out scores of the last ScoreHeldOut, every worker its own; the sums are
  // all-gathered and added in worker order, so every worker takes the same steps.
  std::vector<double> logits(held_scores_.size());
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = LogitOf(held_scores_[i]);
  OffsetFit fit;
  for (int it = 0; it < kOffsetIterations; ++it) {
    const OffsetSums mine = SumsAt(fit.offset, logits, held_labels_);
    FERRY_ASSIGN_OR_RETURN(
        std::vector<OffsetSums> all,
        GatherSums(w_, mine, /*to_all=*/true, "bad calibration sums from a worker"));
    OffsetSums total;
    for (const OffsetSums& s : all) {
      total.gradient += s.gradient;
      total.hessian += s.hessian;
      total.count += s.count;
    }
    if (!fit.Step(total)) break;
  }
  return fit.offset;
}

std::string WorkerLoop::KeptDir(uint32_t epoch) const {
  if (!o_.checkpoint_dir.empty()) return KeptModelDir(o_.checkpoint_dir, epoch);
  if (o_.model_out.empty()) return "";
  return o_.model_out + ".kept-" + std::to_string(epoch) + "." + std::to_string(getpid());
}

Status WorkerLoop::Keep(uint32_t epoch, const EvalMetrics& validation, bool last) {
  if (!kept_.dir.empty() && kept_.ours) superseded_ = kept_.dir;
  kept_ = Kept();
  kept_.epoch = epoch;
  kept_.validation = validation;
  // Its calibration comes from the held-out scores just taken, honest ones: a refit model later
  // has no held-out lines left, and takes this offset (the same pass count on a tenth more
  // lines overfits about as much).
  FERRY_ASSIGN_OR_RETURN(kept_.offset, FitOffset());
  // The last pass's model stays on the servers: the end scores and exports it as usual. With a
  // refit to come, the kept model is only a pass count and an offset.
  if (last || o_.refit == TrainOptions::Refit::kOn) return Status::Ok();
  step_.SetLogitOffset(kept_.offset);
  auto test = ScoreTest();
  step_.SetLogitOffset(0);  // streaming evaluations score the model as it trains
  FERRY_RETURN_IF_ERROR(test.status());
  kept_.test = *test;
  kept_.dir = KeptDir(epoch);
  if (lead_ && !kept_.dir.empty()) {
    // A quiet point: every worker passed the barrier of this pass and scores only.
    if (::mkdir(kept_.dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("create " + kept_.dir + " for the kept model", errno);
    }
    FERRY_RETURN_IF_ERROR(w_.Checkpoint(kept_.dir));
  }
  // Nobody trains on until the kept model is safe.
  return w_.Barrier();
}

Status WorkerLoop::RecordEpoch(const EpochEntry& entry) {
  if (!lead_) return Status::Ok();
  epochs_.push_back(entry);
  if (o_.checkpoint_dir.empty()) return Status::Ok();
  return WriteEpochLog(o_.checkpoint_dir, epochs_);
}

Result<bool> WorkerLoop::EndEpoch(uint32_t epoch) {
  const double train_loss = epoch_n_ > 0 ? epoch_loss_ / static_cast<double>(epoch_n_) : 0;
  epoch_loss_ = 0;
  epoch_n_ = 0;
  if (!HasHeldOut()) {
    const EpochVerdict v = stopper_.ObserveWithoutLoss(epoch);
    if (v.stop) stop_reason_ = v.reason;
    return v.stop;
  }
  // Every worker's pushes are applied before anyone scores the held-out data.
  FERRY_RETURN_IF_ERROR(step_.Drain());
  FERRY_RETURN_IF_ERROR(w_.Barrier());
  FERRY_ASSIGN_OR_RETURN(EvalMetrics held, ScoreHeldOut());
  const EpochVerdict v = stopper_.Observe(epoch, held.logloss);
  if (v.best) FERRY_RETURN_IF_ERROR(Keep(epoch, held, v.stop));
  EpochEntry entry;
  entry.epoch = epoch;
  entry.kept = v.best;
  entry.validation = held;
  if (v.best) {
    entry.test = kept_.test;
    entry.offset = kept_.offset;
  }
  FERRY_RETURN_IF_ERROR(RecordEpoch(entry));
  if (lead_ && !superseded_.empty()) {
    // Only once the record names the new kept model: a job resumed in between finds the one
    // its record names.
    std::error_code ec;
    std::filesystem::remove_all(superseded_, ec);
    superseded_.clear();
  }
  if (lead_) {
    Log("ferry-train: epoch " + std::to_string(epoch) + ": train logloss " +
        Figure("%.5f", train_loss) + ", held-out logloss " + Figure("%.5f", held.logloss) +
        ", AUC " + Figure("%.5f", held.auc) + (v.best ? " (best so far)" : ""));
    if (metrics_) {
      MetricsLine line("epoch");
      line.Set("epoch", static_cast<uint64_t>(epoch));
      line.Set("samples", samples_ * w_.num_workers());
      line.Set("train_logloss", train_loss);
      line.Set("validation_logloss", held.logloss);
      line.Set("validation_auc", held.auc);
      line.Set("validation_calibration", held.calibration);
      line.Set("validation_samples", held.count);
      line.Set("best", v.best);
      line.Set("elapsed_s", SecondsSince(start_));
      FERRY_RETURN_IF_ERROR(metrics_->Write(line));
    }
  }
  if (v.stop) stop_reason_ = v.reason;
  return v.stop;
}

Result<bool> WorkerLoop::RestoreEpochs(uint64_t clock) {
  if (!HasHeldOut() || steps_per_epoch_ == 0) return false;
  const uint32_t completed = static_cast<uint32_t>(clock / steps_per_epoch_);
  // Worker 0 reads the record (the checkpoint directory's, or the one beside the checkpoint
  // resumed from) and hands it to everyone: the verdicts replay alike on every worker.
  std::vector<uint8_t> mine;
  std::string dir;  // worker 0: where the record and the kept models are
  if (lead_) {
    dir = o_.checkpoint_dir;
    if (dir.empty()) {
      FERRY_ASSIGN_OR_RETURN(std::string resolved, ps::ResolveCheckpoint(o_.resume));
      dir = std::filesystem::path(resolved).parent_path().string();
    }
    FERRY_ASSIGN_OR_RETURN(auto log, ReadEpochLog(dir));
    if (log) {
      const std::string text = EncodeEpochLog(*log);
      mine.assign(text.begin(), text.end());
    } else if (completed > 0) {
      Log("ferry-train: warning: no record of the passes before the checkpoint (" + dir +
          "/EPOCHS): early stopping starts afresh at epoch " + std::to_string(completed + 1));
    }
  }
  FERRY_ASSIGN_OR_RETURN(auto all, w_.GatherFromWorkers(mine, /*to_all=*/true));
  const std::vector<uint8_t>& bytes = all.front();
  if (bytes.empty()) return completed > 0 && clock % steps_per_epoch_ == 0;
  FERRY_ASSIGN_OR_RETURN(
      auto entries,
      ParseEpochLog(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())));
  for (const EpochEntry& e : entries) {
    if (e.epoch > completed) break;  // recorded after the checkpoint: the passes run again
    const EpochVerdict v = stopper_.Observe(e.epoch, e.validation.logloss);
    if (v.best != e.kept) {
      return InvalidArgument("the record of epoch " + std::to_string(e.epoch) +
                             " does not replay (other --patience or --min-improvement than the "
                             "run that wrote it?)");
    }
    if (e.kept) {
      kept_ = Kept();
      kept_.epoch = e.epoch;
      kept_.validation = e.validation;
      kept_.test = e.test;
      kept_.offset = e.offset;
      if (lead_) kept_.dir = KeptModelDir(dir, e.epoch);
      kept_.ours = !o_.checkpoint_dir.empty();
    }
    if (lead_) epochs_.push_back(e);
    if (v.stop) stop_reason_ = v.reason;
  }
  const bool decided = std::any_of(entries.begin(), entries.end(),
                                   [&](const EpochEntry& e) { return e.epoch == completed; });
  return completed > 0 && clock % steps_per_epoch_ == 0 && !decided;
}

Status WorkerLoop::Refit() {
  // The passes chose how long to train; the held-out lines trained nothing. A fresh model (every
  // table emptied: rows come back with their initializers) now trains on every line for that
  // many passes: on small data a tenth more lines is worth more than the check it bought.
  FERRY_RETURN_IF_ERROR(step_.Drain());
  FERRY_RETURN_IF_ERROR(w_.Barrier());
  if (lead_) FERRY_RETURN_IF_ERROR(w_.ClearTables());
  FERRY_RETURN_IF_ERROR(w_.Barrier());
  FERRY_ASSIGN_OR_RETURN(ReaderOptions all, ReaderFor(o_.train_files, Side::kAll, true));
  all.on_malformed = [](const std::string&) {};  // both sides reported theirs already
  FERRY_ASSIGN_OR_RETURN(reader_, Reader::Open(all));
  if (o_.consistency.kind != ps::Consistency::kAsp) {
    FERRY_RETURN_IF_ERROR(CountSteps(/*share=*/true));  // the same gathers on every worker
  }
  const uint32_t passes = kept_.epoch;
  Log("ferry-train: refit: a fresh model trains " + std::to_string(passes) +
      (passes == 1 ? " pass" : " passes") + " over all the training lines, held-out ones included");
  const bool pipelined = o_.consistency.kind == ps::Consistency::kAsp;
  // No export-directory version of a model trained from scratch again: serving would go back to
  // a younger model; the end's version is the refit one.
  refitting_ = true;
  for (uint32_t pass = 1; pass <= passes; ++pass) {
    if (pass > 1) FERRY_RETURN_IF_ERROR(reader_->Rewind());
    FERRY_RETURN_IF_ERROR(pipelined ? TrainPipelined(pass) : TrainSequential(pass, 0));
  }
  refitting_ = false;
  refitted_ = true;
  return Status::Ok();
}

}  // namespace ferry::models
