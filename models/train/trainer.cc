// The training job of a worker: setup, the passes, the end (trainer.h; the decisions after each
// pass are trainer_epochs.cc, one pass is trainer_passes.cc).
#include "models/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "models/data/input.h"
#include "models/eval/calibration.h"
#include "models/train/auto_settings.h"
#include "models/train/gather_sums.h"
#include "models/train/worker_loop.h"
#include "ps/job/checkpoint.h"

namespace ferry::models {

namespace {

// The held-out split's hash seed: fixed, so the split depends on the lines alone (not on
// --seed, which only moves the initial weights).
constexpr uint64_t kHoldoutSeed = 0x6665727279686f6cull;
// After a refit of at most this many passes, the model's own offset (Finish).
constexpr uint32_t kOwnOffsetPasses = 2;
// Dealt training: items of a pass per worker (and worker join slot).
constexpr uint32_t kDealItemsPerWorker = 32;

EarlyStoppingOptions StoppingFor(const TrainOptions& o) {
  EarlyStoppingOptions s;
  s.max_epochs = o.max_epochs;
  // A fixed --epochs runs every pass (the best is still the one kept); only automatic passes
  // stop for want of improvement.
  s.patience = o.epochs != 0 ? UINT32_MAX : o.patience;
  s.min_improvement = o.min_improvement;
  return s;
}

// What every worker adds up at the end (GatherSums: 8-byte fields, in this order).
struct Totals {
  uint64_t samples = 0;
  double seconds = 0;
  double loss_sum = 0;
  uint64_t malformed = 0;
};

}  // namespace

std::string Figure(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

double SecondsSince(TrainClock::time_point since) {
  return std::chrono::duration<double>(TrainClock::now() - since).count();
}

WorkerLoop::WorkerLoop(ps::Worker& w, const TrainOptions& o, const ModelDef& def)
    : w_(w),
      o_(o),
      def_(def),
      step_(w, def),
      lead_(w.index() == 0),
      stopper_(StoppingFor(o)),
      dealt_(DealtTraining(o)) {}

Result<ReaderOptions> WorkerLoop::ReaderFor(const std::vector<std::string>& files, Side side,
                                            bool sharded) const {
  ReaderOptions r;
  r.format = o_.format;
  r.files = files;
  // With worker join slots worker 0 scores the test files alone: the workers change meanwhile.
  if (TestOnLead() && sharded && side == Side::kAll && files == o_.test_files) sharded = false;
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
  if (dealt_) {
    // Items of about 1/32 of a worker's share each: a joining worker finds some left, and a
    // leaving one reads at most one more. Read by this thread (dealt input: reader.h).
    deal_items_ = kDealItemsPerWorker * w_.job().worker_members();
    train.deal_items = deal_items_;
    train.shard = 0;  // no shard of its own: the items it is dealt
    train.num_shards = 1;
    train.threads = 1;
    train.deal = [this](uint64_t pass) -> Result<std::optional<uint64_t>> {
      if (Leaving()) return std::optional<uint64_t>();
      return w_.TakeWork(pass, deal_items_);
    };
  }
  FERRY_ASSIGN_OR_RETURN(reader_, Reader::Open(train));
  if (lead_ && w_.num_workers() > 1 && !dealt_) FERRY_RETURN_IF_ERROR(WarnIdleWorkers());
  if (split || !o_.validation_files.empty()) {
    FERRY_ASSIGN_OR_RETURN(ReaderOptions held,
                           split ? ReaderFor(o_.train_files, Side::kHeldOut, true)
                                 : ReaderFor(o_.validation_files, Side::kAll, true));
    FERRY_ASSIGN_OR_RETURN(held_out_, Reader::Open(held));
  }
  FERRY_RETURN_IF_ERROR(OpenOutputs());
  // bsp/ssp need the steps per epoch; a progress bar on a terminal wants the total. Otherwise
  // (asp, no bar) the counting pass over the data is skipped.
  const bool bar = lead_ && !o_.quiet &&
                   (o_.progress == TrainOptions::Progress::kAlways ||
                    (o_.progress == TrainOptions::Progress::kAuto && IsTerminal(STDERR_FILENO)));
  if (dealt_) {
    // No counting pass: the workers' shares are not known before they are dealt.
  } else if (o_.consistency.kind != ps::Consistency::kAsp) {
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

Status WorkerLoop::OpenOutputs() {
  if (lead_ && !o_.metrics_json.empty()) {
    FERRY_ASSIGN_OR_RETURN(MetricsJsonWriter m, MetricsJsonWriter::Open(o_.metrics_json));
    metrics_.emplace(std::move(m));
  }
  if (!o_.test_files.empty()) {
    // A missing or unreadable test file is an error now, not after the training.
    FERRY_ASSIGN_OR_RETURN(ReaderOptions t, ReaderFor(o_.test_files, Side::kAll, true));
    FERRY_RETURN_IF_ERROR(Reader::Open(t).status());
  }
  return Status::Ok();
}

Status WorkerLoop::WarnIdleWorkers() {
  FERRY_ASSIGN_OR_RETURN(std::vector<uint32_t> idle,
                         ShardsWithoutInput(o_.train_files, w_.num_workers()));
  if (idle.empty()) return Status::Ok();
  // Only gzip files leave a shard without input (reader.h): name them.
  std::string gz;
  size_t gz_files = 0;
  for (const std::string& path : o_.train_files) {
    FERRY_ASSIGN_OR_RETURN(InputFile in, ProbeInput(path));
    if (!in.gzip) continue;
    gz += (gz_files++ > 0 ? ", " : "") + path;
  }
  std::string who;
  for (uint32_t s : idle) who += (who.empty() ? "" : ", ") + std::to_string(s);
  const std::string it = gz_files == 1 ? "it" : "them";
  const std::string workers = std::to_string(w_.num_workers());
  const std::string msg =
      "ferry-train: warning: --train " + gz +
      ": a gzip stream cannot be split (each gzip file is read whole by one worker); worker" +
      (idle.size() == 1 ? " " + who + " of " + workers + " gets"
                        : "s " + who + " of " + workers + " get") +
      " no training data: decompress " + it + " or split " + it + " into " + workers +
      " files or more (docs/training.md)";
  // On stderr even with --quiet: idle workers are a mistake in the job's setup, not progress.
  std::fprintf(stderr, "%s\n", msg.c_str());
  return Status::Ok();
}

// The job, step by step: readers, metrics and the counting pass (Setup), resuming, the epochs,
// the refit, then the end (Finish: evaluation, reduction, export).
Status WorkerLoop::Run(TrainReport* report) {
  FERRY_RETURN_IF_ERROR(OpenExportDir());
  if (StreamTraining(o_)) return RunStream(report);
  FERRY_RETURN_IF_ERROR(Setup());
  FERRY_RETURN_IF_ERROR(ReadStraggler());
  FERRY_ASSIGN_OR_RETURN(const ResumePoint at, Resume());
  start_ = TrainClock::now();
  SayJoined();
  FERRY_ASSIGN_OR_RETURN(const uint32_t last_epoch, RunEpochs(at));
  if (leaving_) return LeaveJob();  // SIGTERM: it goes, the job goes on
  LogStop(last_epoch);
  if (o_.refit == TrainOptions::Refit::kOn) FERRY_RETURN_IF_ERROR(Refit());
  return Finish(last_epoch, report);
}

Result<WorkerLoop::ResumePoint> WorkerLoop::Resume() {
  // A periodic checkpoint's job goes on at its clock: one batch per clock under bsp.
  ResumePoint at;
  if (w_.restored() && w_.restored()->position) {
    FERRY_ASSIGN_OR_RETURN(at.first_step, SeekToCheckpoint());
    FERRY_ASSIGN_OR_RETURN(at.decide_first, RestoreEpochs(at.first_step));
    Log("ferry-train: resumed at batch " + std::to_string(at.first_step) + " (epoch " +
        std::to_string(at.first_step / std::max<uint64_t>(steps_per_epoch_, 1) + 1) + ")");
  }
  return at;
}

Result<uint32_t> WorkerLoop::RunEpochs(const ResumePoint& at) {
  const bool pipelined = o_.consistency.kind == ps::Consistency::kAsp;
  const uint32_t first_epoch =
      steps_per_epoch_ > 0 ? static_cast<uint32_t>(at.first_step / steps_per_epoch_) + 1 : 1;
  uint32_t epoch = first_epoch;
  bool stop = !stop_reason_.empty();
  if (!stop && at.decide_first) {
    // The checkpoint fell on the end of a pass whose decision was not recorded yet.
    FERRY_ASSIGN_OR_RETURN(stop, EndEpoch(first_epoch - 1));
  }
  if (stop) epoch = first_epoch - 1;
  for (; !stop; ++epoch) {
    // The first epoch's reader stands at its first batch (CountSteps rewound it, and a resumed
    // one was moved on by SeekToCheckpoint).
    if (epoch > first_epoch) FERRY_RETURN_IF_ERROR(reader_->Rewind());
    const uint64_t skip =
        epoch == first_epoch ? at.first_step % std::max<uint64_t>(steps_per_epoch_, 1) : 0;
    if (dealt_) {
      FERRY_RETURN_IF_ERROR(TrainDealt(epoch));
      if (leaving_) break;
    } else {
      FERRY_RETURN_IF_ERROR(pipelined ? TrainPipelined(epoch) : TrainSequential(epoch, skip));
    }
    FERRY_ASSIGN_OR_RETURN(stop, EndEpoch(epoch));
    if (stop) break;
  }
  return epoch;
}

void WorkerLoop::LogStop(uint32_t last_epoch) {
  if (!HasHeldOut()) return;
  Log("ferry-train: stopped after epoch " + std::to_string(last_epoch) + ": " + stop_reason_ +
      "; the best was epoch " + std::to_string(kept_.epoch) + " (held-out logloss " +
      Figure("%.5f", kept_.validation.logloss) + ")" +
      (o_.refit == TrainOptions::Refit::kOn ? "" : ", its model is kept"));
}

Status WorkerLoop::Finish(uint32_t last_epoch, TrainReport* report) {
  FERRY_RETURN_IF_ERROR(step_.Drain());
  ReportSkipped();
  const double train_seconds = SecondsSince(start_);
  // Dealt training: the workers run out of data at different clocks, and one waiting in the
  // barrier must not hold the others' clocks (bsp, ssp).
  if (dealt_) FERRY_RETURN_IF_ERROR(w_.StopClocks());
  // Every worker's pushes are applied before anyone evaluates the final model.
  FERRY_RETURN_IF_ERROR(w_.Barrier());
  const bool current = kept_.epoch == 0 || kept_.epoch == last_epoch || refitted_;
  FERRY_ASSIGN_OR_RETURN(const double offset, FinalOffset());
  EvalMetrics test = kept_.test;
  if (current) {
    step_.SetLogitOffset(offset);
    FERRY_ASSIGN_OR_RETURN(test, ScoreTest());
  }
  offset_ = offset;
  FERRY_ASSIGN_OR_RETURN(std::optional<TrainReport> rep, Reduce(last_epoch, train_seconds));
  if (!rep) return Status::Ok();  // worker 0 reports, writes and exports
  rep->logit_offset = offset;
  rep->test = test;
  FERRY_RETURN_IF_ERROR(WriteFinalRecord(*rep, last_epoch));
  FERRY_RETURN_IF_ERROR(ExportKept(current));
  if (report != nullptr) *report = *rep;
  return Status::Ok();
}

Result<double> WorkerLoop::FinalOffset() {
  if (refitted_ && o_.calibrate && (!def_.dense.empty() || kept_.epoch <= kOwnOffsetPasses)) {
    // A model with dense layers drifts in its intercept from run to run (Adam on the output
    // bias): the refit model's own offset, from the held-out lines it has now seen, calibrated
    // better than the selection run's (DeepFM on 100k samples: 1.009 against 1.027, the MLP
    // 1.007 against 0.951). So does a model of one or two passes: it is still moving fast when
    // it stops, and a quarter more lines move it past the selection run's offset (fm on 100k
    // samples, one pass: 0.978 twice against 0.868 and 0.965), while lines seen once or twice
    // are not yet overfitted. The others keep the selection run's, fitted on lines they had not
    // seen: on small data they overfit, and their own lines would hide it (text, 1,500 documents,
    // 20 passes and more: 0.96 against 0.86).
    FERRY_RETURN_IF_ERROR(ScoreHeldOut().status());
    return FitOffset();
  }
  return kept_.offset;
}

void WorkerLoop::SayJoined() const {
  if (!w_.join_slot() || o_.quiet) return;
  if (StreamTraining(o_)) {
    // Its place in the windows' rounds of gathers (trainer_stream.cc): after round N, or in it.
    const uint64_t g = w_.last_gather_id();
    std::fprintf(stderr, "ferry-train: worker %u joined the running job %s window %llu\n",
                 w_.index(), g % 2 == 1 ? "as the others closed" : "after",
                 static_cast<unsigned long long>((g + 1) / 2));
  } else {
    std::fprintf(stderr, "ferry-train: worker %u joined the running job at clock %llu\n",
                 w_.index(), static_cast<unsigned long long>(w_.clock()));
  }
}

Status WorkerLoop::LeaveJob() {
  FERRY_RETURN_IF_ERROR(step_.Drain());
  // The totals it would have given the end's gather go to the others with its leave: worker 0
  // adds them (Reduce).
  Totals mine;
  mine.samples = samples_;
  mine.seconds = SecondsSince(start_);
  mine.loss_sum = loss_sum_;
  mine.malformed = reader_->stats().malformed;
  std::vector<uint8_t> bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  FERRY_RETURN_IF_ERROR(w_.Leave(bytes));
  std::fprintf(stderr, "ferry-train: worker %u left the job after %llu samples\n", w_.index(),
               static_cast<unsigned long long>(samples_));
  return Status::Ok();
}

Result<std::optional<TrainReport>> WorkerLoop::Reduce(uint32_t last_epoch, double train_seconds) {
  Totals mine;
  mine.samples = samples_;
  mine.seconds = train_seconds;
  mine.loss_sum = loss_sum_;
  // After a refit the training reader reads every line, the held-out ones included.
  mine.malformed = reader_->stats().malformed + (refitted_ ? 0 : held_out_malformed_);
  std::vector<uint32_t> from;
  FERRY_ASSIGN_OR_RETURN(
      std::vector<Totals> parts,
      GatherSums(w_, mine, /*to_all=*/false, "worker totals have a bad length", &from));
  if (!lead_) return std::optional<TrainReport>();
  TrainReport rep;
  // Dealt training: the workers that joined sent theirs too, and those that left said theirs on
  // leaving (LeaveJob).
  for (uint32_t w : from) rep.workers_joined += w >= w_.job().workers ? 1 : 0;
  for (const auto& [w, bytes] : w_.farewells()) {
    if (bytes.size() != sizeof(Totals)) return ProtocolError("worker totals have a bad length");
    Totals t;
    std::memcpy(&t, bytes.data(), sizeof t);
    parts.push_back(t);
    ++rep.workers_left;
    rep.workers_joined += w >= w_.job().workers ? 1 : 0;
  }
  double train_loss = 0;
  for (const Totals& t : parts) {
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
  rep.stop_reason = stop_reason_;
  rep.batch_size = o_.batch_size;
  rep.validation = kept_.validation;
  return std::optional<TrainReport>(std::move(rep));
}

Status WorkerLoop::WriteFinalRecord(const TrainReport& rep, uint32_t last_epoch) {
  if (progress_ != nullptr) {
    ProgressState s;
    s.samples = rep.samples;
    s.train_logloss = rep.train_logloss;
    s.last_auc = rep.test.auc;
    progress_->Finish(s);
  }
  if (!metrics_) return Status::Ok();
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
  return metrics_->Write(line);
}

Status RunTraining(ps::Node& node, const TrainOptions& o, const ModelDef& def,
                   TrainReport* report) {
  Status first;
  if (ps::Worker* w = node.worker()) {
    WorkerLoop loop(*w, o, def);
    loop.SetLeaveCheck([&node] { return node.worker_leave_requested(); });
    first = loop.Run(report);
    if (report != nullptr) {
      report->servers_joined = w->servers_joined();
      const uint32_t served = w->num_servers() + report->servers_joined;
      report->servers_removed = served > w->live_servers() ? served - w->live_servers() : 0;
    }
    // A worker that failed alone (its input, say) must not finish politely: the others may be
    // waiting for it in a collective, and Finish would wait for them. Leaving the job (the
    // Node's destructor) fails their waits at once.
    if (!first.ok()) return first;
    first = w->Finish();  // Ok at once after a leave
  }
  Status joined = node.Join();
  return first.ok() ? joined : first;
}

}  // namespace ferry::models
