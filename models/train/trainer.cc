// The training job of a worker: setup, passes, the decisions after each pass, the end
// (trainer.h; one pass is trainer_passes.cc).
#include "models/train/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "models/eval/calibration.h"
#include "models/train/export.h"
#include "models/train/worker_loop.h"
#include "ps/checkpoint.h"

namespace ferry::models {

namespace {

// The held-out split's hash seed: fixed, so the split depends on the lines alone (not on
// --seed, which only moves the initial weights).
constexpr uint64_t kHoldoutSeed = 0x6665727279686f6cull;

EarlyStoppingOptions StoppingFor(const TrainOptions& o) {
  EarlyStoppingOptions s;
  s.max_epochs = o.max_epochs;
  // A fixed --epochs runs every pass (the best is still the one kept); only automatic passes
  // stop for want of improvement.
  s.patience = o.epochs != 0 ? UINT32_MAX : o.patience;
  s.min_improvement = o.min_improvement;
  return s;
}

std::string Figure(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Held-out scores a worker sends to worker 0 for the AUC (8 bytes each, over the control
// plane); a larger shard reports its logloss and calibration only.
constexpr uint64_t kMaxHeldOutScores = uint64_t{1} << 22;

// What every worker adds up at the end (a fixed little-endian record for Gather).
struct Totals {
  uint64_t samples = 0;
  double seconds = 0;
  double loss_sum = 0;
  uint64_t malformed = 0;

  std::vector<uint8_t> Encode() const {
    std::vector<uint8_t> out(32);
    std::memcpy(out.data(), &samples, 8);
    std::memcpy(out.data() + 8, &seconds, 8);
    std::memcpy(out.data() + 16, &loss_sum, 8);
    std::memcpy(out.data() + 24, &malformed, 8);
    return out;
  }
  static Result<Totals> Decode(const std::vector<uint8_t>& in) {
    if (in.size() != 32) return ProtocolError("worker totals have a bad length");
    Totals t;
    std::memcpy(&t.samples, in.data(), 8);
    std::memcpy(&t.seconds, in.data() + 8, 8);
    std::memcpy(&t.loss_sum, in.data() + 16, 8);
    std::memcpy(&t.malformed, in.data() + 24, 8);
    return t;
  }
};

}  // namespace

double SecondsSince(TrainClock::time_point since) {
  return std::chrono::duration<double>(TrainClock::now() - since).count();
}

WorkerLoop::WorkerLoop(ps::Worker& w, const TrainOptions& o, const ModelDef& def)
    : w_(w), o_(o), def_(def), step_(w, def), lead_(w.index() == 0), stopper_(StoppingFor(o)) {}

Result<ReaderOptions> WorkerLoop::ReaderFor(const std::vector<std::string>& files, Side side,
                                            bool sharded) const {
  ReaderOptions r;
  r.format = o_.format;
  r.files = files;
  r.shard = sharded ? w_.index() : 0;
  r.num_shards = sharded ? w_.num_workers() : 1;
  r.strict = o_.strict;
  r.threads = o_.parse_threads;
  r.hash_seed = o_.hash_seed;
  r.hash_bits = o_.hash_bits;
  r.field_map = field_map_;
  if (side != Side::kAll) {
    r.holdout.fraction = o_.validation_fraction;
    r.holdout.seed = kHoldoutSeed;
    r.holdout.keep = side == Side::kHeldOut ? ReaderOptions::Holdout::Keep::kHeldOut
                                            : ReaderOptions::Holdout::Keep::kRest;
  }
  return r;
}

void WorkerLoop::Log(const std::string& line) {
  if (!lead_ || o_.quiet) return;
  if (progress_ != nullptr) {
    progress_->Print(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

Status WorkerLoop::Setup() {
  if (!o_.field_map.empty()) {
    FERRY_ASSIGN_OR_RETURN(FieldMap map, FieldMap::Load(o_.field_map));
    field_map_ = std::make_shared<const FieldMap>(std::move(map));
  }
  // The training lines minus the held-out ones (when the held-out data comes from them).
  const bool split = o_.validation_files.empty() && o_.validation_fraction > 0;
  FERRY_ASSIGN_OR_RETURN(
      ReaderOptions train,
      ReaderFor(o_.train_files, split ? Side::kTraining : Side::kAll, /*sharded=*/true));
  FERRY_ASSIGN_OR_RETURN(reader_, Reader::Open(train));
  if (split || !o_.validation_files.empty()) {
    FERRY_ASSIGN_OR_RETURN(ReaderOptions held,
                           split ? ReaderFor(o_.train_files, Side::kHeldOut, true)
                                 : ReaderFor(o_.validation_files, Side::kAll, true));
    FERRY_ASSIGN_OR_RETURN(held_out_, Reader::Open(held));
  }
  if (lead_ && !o_.metrics_json.empty()) {
    FERRY_ASSIGN_OR_RETURN(MetricsJsonWriter m, MetricsJsonWriter::Open(o_.metrics_json));
    metrics_.emplace(std::move(m));
  }
  if (!o_.test_files.empty()) {
    // A missing or unreadable test file is an error now, not after the training.
    FERRY_ASSIGN_OR_RETURN(ReaderOptions t, ReaderFor(o_.test_files, Side::kAll, true));
    FERRY_RETURN_IF_ERROR(Reader::Open(t).status());
  }
  // bsp/ssp need the steps per epoch; a progress bar on a terminal wants the total. Otherwise
  // (asp, no bar) the counting pass over the data is skipped.
  const bool bar = lead_ && !o_.quiet &&
                   (o_.progress == TrainOptions::Progress::kAlways ||
                    (o_.progress == TrainOptions::Progress::kAuto && IsTerminal(STDERR_FILENO)));
  if (o_.consistency.kind != ps::Consistency::kAsp) {
    FERRY_RETURN_IF_ERROR(CountSteps(/*share=*/true));
  } else if (bar) {
    // Only worker 0 knows it has a terminal: it counts its own shard, without a gather (every
    // worker must make the same sequence of gathers), and scales by the worker count.
    FERRY_RETURN_IF_ERROR(CountSteps(/*share=*/false));
  }
  if (lead_ && !o_.quiet && o_.progress != TrainOptions::Progress::kNever) {
    ProgressOptions po;
    po.tty = o_.progress == TrainOptions::Progress::kAlways || IsTerminal(STDERR_FILENO);
    // With automatic passes the total is not known: the display counts without an ETA.
    po.total_samples = o_.epochs != 0 ? total_samples_ * o_.epochs : 0;
    progress_ = std::make_unique<ProgressDisplay>(std::cerr, po);
  }
  if (lead_ && !o_.quiet) {
    std::string line = "ferry-train: batch size " + std::to_string(o_.batch_size) + " per worker";
    if (o_.data_samples > 0)
      line += " (" + std::to_string(o_.data_samples) + " training samples, estimated)";
    line += o_.epochs == 0 ? "; passes: automatic, at most " + std::to_string(o_.max_epochs)
                           : "; passes: " + std::to_string(o_.epochs);
    if (HasHeldOut()) {
      line += o_.validation_files.empty()
                  ? "; held out: " + Figure("%g", 100 * o_.validation_fraction) +
                        "% of the training lines"
                  : "; held out: the validation files";
    }
    Log(line);
  }
  return LoadEvalSet();
}

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
  FERRY_ASSIGN_OR_RETURN(auto all, w_.Gather(sums.Encode(), /*to_all=*/true));
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
  FERRY_ASSIGN_OR_RETURN(auto parts, w_.Gather(mine.Encode(), /*to_all=*/false));
  if (lead_) {
    FERRY_ASSIGN_OR_RETURN(EvalMetrics with_auc, MergeParts(parts));
    m.auc = with_auc.auc;
  }
  return m;
}

Result<EvalMetrics> WorkerLoop::ScoreTest() {
  EvalPart mine;
  if (!o_.test_files.empty()) {
    FERRY_ASSIGN_OR_RETURN(ReaderOptions t, ReaderFor(o_.test_files, Side::kAll, true));
    FERRY_ASSIGN_OR_RETURN(auto r, Reader::Open(t));
    FERRY_RETURN_IF_ERROR(ScoreShard(step_, *r, o_.batch_size, /*keep_scores=*/true, &mine));
  }
  FERRY_ASSIGN_OR_RETURN(auto parts, w_.Gather(mine.Encode(), /*to_all=*/false));
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
    std::vector<uint8_t> bytes(24);
    std::memcpy(bytes.data(), &mine.gradient, 8);
    std::memcpy(bytes.data() + 8, &mine.hessian, 8);
    std::memcpy(bytes.data() + 16, &mine.count, 8);
    FERRY_ASSIGN_OR_RETURN(auto all, w_.Gather(bytes, /*to_all=*/true));
    OffsetSums total;
    for (const auto& part : all) {
      if (part.size() != 24) return ProtocolError("bad calibration sums from a worker");
      OffsetSums s;
      std::memcpy(&s.gradient, part.data(), 8);
      std::memcpy(&s.hessian, part.data() + 8, 8);
      std::memcpy(&s.count, part.data() + 16, 8);
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
  FERRY_ASSIGN_OR_RETURN(auto all, w_.Gather(mine, /*to_all=*/true));
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

Status WorkerLoop::Run(TrainReport* report) {
  FERRY_RETURN_IF_ERROR(Setup());
  // A periodic checkpoint's job goes on at its clock: one batch per clock under bsp.
  uint64_t first_step = 0;
  bool decide_first = false;
  if (w_.restored() && w_.restored()->position) {
    FERRY_ASSIGN_OR_RETURN(first_step, SeekToCheckpoint());
    FERRY_ASSIGN_OR_RETURN(decide_first, RestoreEpochs(first_step));
    Log("ferry-train: resumed at batch " + std::to_string(first_step) + " (epoch " +
        std::to_string(first_step / std::max<uint64_t>(steps_per_epoch_, 1) + 1) + ")");
  }
  start_ = TrainClock::now();
  const bool pipelined = o_.consistency.kind == ps::Consistency::kAsp;
  const uint32_t first_epoch =
      steps_per_epoch_ > 0 ? static_cast<uint32_t>(first_step / steps_per_epoch_) + 1 : 1;
  uint32_t epoch = first_epoch;
  bool stop = !stop_reason_.empty();
  if (!stop && decide_first) {
    // The checkpoint fell on the end of a pass whose decision was not recorded yet.
    FERRY_ASSIGN_OR_RETURN(stop, EndEpoch(first_epoch - 1));
  }
  if (stop) epoch = first_epoch - 1;
  for (; !stop; ++epoch) {
    // The first epoch's reader stands at its first batch (CountSteps rewound it, and a resumed
    // one was moved on by SeekToCheckpoint).
    if (epoch > first_epoch) FERRY_RETURN_IF_ERROR(reader_->Rewind());
    const uint64_t skip =
        epoch == first_epoch ? first_step % std::max<uint64_t>(steps_per_epoch_, 1) : 0;
    FERRY_RETURN_IF_ERROR(pipelined ? TrainPipelined(epoch) : TrainSequential(epoch, skip));
    FERRY_ASSIGN_OR_RETURN(stop, EndEpoch(epoch));
    if (stop) break;
  }
  if (HasHeldOut()) {
    Log("ferry-train: stopped after epoch " + std::to_string(epoch) + ": " + stop_reason_ +
        "; the best was epoch " + std::to_string(kept_.epoch) + " (held-out logloss " +
        Figure("%.5f", kept_.validation.logloss) + ")" +
        (o_.refit == TrainOptions::Refit::kOn ? "" : ", its model is kept"));
  }
  if (o_.refit == TrainOptions::Refit::kOn) FERRY_RETURN_IF_ERROR(Refit());
  return Finish(epoch, report);
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
  for (uint32_t pass = 1; pass <= passes; ++pass) {
    if (pass > 1) FERRY_RETURN_IF_ERROR(reader_->Rewind());
    FERRY_RETURN_IF_ERROR(pipelined ? TrainPipelined(pass) : TrainSequential(pass, 0));
  }
  refitted_ = true;
  return Status::Ok();
}

Status WorkerLoop::Finish(uint32_t last_epoch, TrainReport* report) {
  FERRY_RETURN_IF_ERROR(step_.Drain());
  const double train_seconds = SecondsSince(start_);
  // Every worker's pushes are applied before anyone evaluates the final model.
  FERRY_RETURN_IF_ERROR(w_.Barrier());
  const bool current = kept_.epoch == 0 || kept_.epoch == last_epoch || refitted_;
  EvalMetrics test = kept_.test;
  double offset = kept_.offset;
  if (refitted_ && o_.calibrate && !def_.dense.empty()) {
    // A model with dense layers drifts in its intercept from run to run (Adam on the output
    // bias): the refit model's own offset, from the held-out lines it has now seen, calibrated
    // better than the selection run's (DeepFM on 100k samples: 1.009 against 1.027, the MLP
    // 1.007 against 0.951). The others keep the selection run's, fitted on lines they had not
    // seen: on small data they overfit, and their own lines would hide it (text, 1,500
    // documents: 0.96 against 0.86).
    FERRY_RETURN_IF_ERROR(ScoreHeldOut().status());
    FERRY_ASSIGN_OR_RETURN(offset, FitOffset());
  }
  if (current) {
    step_.SetLogitOffset(offset);
    FERRY_ASSIGN_OR_RETURN(test, ScoreTest());
  }
  offset_ = offset;
  Totals mine;
  mine.samples = samples_;
  mine.seconds = train_seconds;
  mine.loss_sum = loss_sum_;
  // After a refit the training reader reads every line, the held-out ones included.
  mine.malformed = reader_->stats().malformed + (refitted_ ? 0 : held_out_malformed_);
  FERRY_ASSIGN_OR_RETURN(auto parts, w_.Gather(mine.Encode()));
  if (!lead_) return Status::Ok();
  TrainReport rep;
  double train_loss = 0;
  for (const auto& part : parts) {
    FERRY_ASSIGN_OR_RETURN(Totals t, Totals::Decode(part));
    rep.samples += t.samples;
    rep.train_seconds = std::max(rep.train_seconds, t.seconds);
    rep.malformed += t.malformed;
    train_loss += t.loss_sum;
  }
  rep.train_logloss = rep.samples > 0 ? train_loss / static_cast<double>(rep.samples) : 0;
  rep.samples_per_sec =
      rep.train_seconds > 0 ? static_cast<double>(rep.samples) / rep.train_seconds : 0;
  rep.epochs = last_epoch;
  rep.kept_epoch = kept_.epoch == 0 ? last_epoch : kept_.epoch;
  rep.refit = refitted_;
  rep.logit_offset = offset;
  rep.stop_reason = stop_reason_;
  rep.batch_size = o_.batch_size;
  rep.validation = kept_.validation;
  rep.test = test;
  if (progress_ != nullptr) {
    ProgressState s;
    s.samples = rep.samples;
    s.train_logloss = rep.train_logloss;
    s.last_auc = rep.test.auc;
    progress_->Finish(s);
  }
  if (metrics_) {
    EvalRecord rec;
    rec.epoch = last_epoch;
    rec.batches = batches_;
    rec.samples = rep.samples;
    rec.train_logloss = rep.train_logloss;
    rec.logloss = rep.test.logloss;
    rec.auc = rep.test.auc;
    rec.samples_per_sec = rep.samples_per_sec;
    rec.elapsed_s = SecondsSince(start_);
    MetricsLine line = EvalLine("final", rec);
    line.Set("test_samples", rep.test.count);
    line.Set("calibration", rep.test.calibration);
    line.Set("kept_epoch", static_cast<uint64_t>(rep.kept_epoch));
    line.Set("refit", rep.refit);
    line.Set("logit_offset", rep.logit_offset);
    line.Set("stop_reason", rep.stop_reason);
    line.Set("validation_logloss", rep.validation.logloss);
    line.Set("validation_auc", rep.validation.auc);
    line.Set("validation_calibration", rep.validation.calibration);
    line.Set("validation_samples", rep.validation.count);
    line.Set("batch_size", static_cast<uint64_t>(rep.batch_size));
    line.Set("model", ModelKindName(o_.model));
    line.Set("workers", static_cast<uint64_t>(w_.num_workers()));
    line.Set("servers", static_cast<uint64_t>(w_.num_servers()));
    FERRY_RETURN_IF_ERROR(metrics_->Write(line));
  }
  if (!o_.model_out.empty()) FERRY_RETURN_IF_ERROR(Export(current ? "" : kept_.dir));
  if (!current && o_.checkpoint_dir.empty() && !kept_.dir.empty() && kept_.ours) {
    std::error_code ec;
    std::filesystem::remove_all(kept_.dir, ec);
  }
  if (report != nullptr) *report = rep;
  return Status::Ok();
}

Status WorkerLoop::Export(const std::string& from_dir) {
  ModelParams params = DescribeModel(o_, def_);
  if (offset_ != 0) params[std::string(kLogitOffsetParam)] = FormatOffset(offset_);
  if (!from_dir.empty()) {
    Status s = ExportCheckpoint(from_dir, w_.job(), def_, params, o_.model_out, o_.model_format);
    return s.ok() ? s : s.Annotate("export the kept model to " + o_.model_out);
  }
  // The servers write their shards next to the model file (a file system they all reach), this
  // worker turns them into the model, and the shards go.
  const std::string dir = o_.model_out + ".shards." + std::to_string(getpid());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("create " + dir + " for the model export", errno);
  }
  Status s = w_.Checkpoint(dir);
  if (s.ok()) {
    s = ExportCheckpoint(dir, w_.job(), def_, params, o_.model_out, o_.model_format);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return s.ok() ? s : s.Annotate("export the model to " + o_.model_out);
}

Status RunTraining(ps::Node& node, const TrainOptions& o, const ModelDef& def,
                   TrainReport* report) {
  Status first;
  if (ps::Worker* w = node.worker()) {
    WorkerLoop loop(*w, o, def);
    first = loop.Run(report);
    if (first.ok()) first = w->Finish();
  }
  Status joined = node.Join();
  return first.ok() ? joined : first;
}

}  // namespace ferry::models
