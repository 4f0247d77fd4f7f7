// Continuous training (worker_loop.h, RunStream): one pass over an unbounded stream, every batch
// scored by the current model before it is trained on (progressive evaluation), one line of
// metrics per window, the usual end (Finish) when the stream ends.
//
// Windows across workers. Each worker closes a window after its share of the window's samples
// (window / workers). Closing is two collectives: the window's scores go to worker 0, which
// merges and reports them; then every worker learns who has reached the end of its input. A
// worker at the end goes on joining rounds (with nothing to add) until every worker is at the
// end: all make the same sequence of collectives, however unequal their shares of the stream.
//
// Workers joining and leaving (worker join slots; rank 0 deals, tools/train/stream_ranks.h). The
// windows' gathers come in pairs from the job's first gather on (nothing gathers before): the
// scores at odd ids, the end flags at even ones. A joining worker takes part in the gathers after
// the job's last one when it joined (ps::Worker::last_gather_id): an odd one means the others
// are between the two of a round, so it first gives its end flag (not at the end), then goes on
// as they do. The coordinator lets no worker in once the stream ended (cli.cc sets the gate), so
// the round that ends the job waits for every worker taking part. A leaving worker asks its
// dealer to stop (Leaving), reads its share to the end, closes a last window with the others and
// leaves with its totals; the rounds after it go on without it.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "models/data/input.h"
#include "models/train/auto_settings.h"
#include "models/train/gather_sums.h"
#include "models/train/worker_loop.h"

namespace ferry::models {

Status WorkerLoop::SetupStream() {
  // A dealt stream arrives on standard input, whatever the command line names.
  // A lockstep worker reads its own files through a pipe of its own (trainer_lockstep.cc).
  std::string input = StreamDealtHere() ? std::string("-") : o_.train_files.front();
  if (LockstepStream(o_)) {
    FERRY_ASSIGN_OR_RETURN(input, StartOwnShare());
  }
  FERRY_ASSIGN_OR_RETURN(ReaderOptions r, ReaderFor({input}, Side::kAll, false));
  if (w_.num_workers() > 1) {
    const std::string share = " (in worker " + std::to_string(w_.index()) + "'s share of " +
                              InputName(o_.train_files.front()) + ")";
    // The pipe's name means nothing to the user: the followed directory stands for it.
    const std::string pipe = input != o_.train_files.front() && input != "-" ? input : "";
    const std::string dir = o_.stream.follow;
    r.on_malformed = [share, pipe, dir](const std::string& m) {
      const bool named = !pipe.empty() && m.compare(0, pipe.size(), pipe) == 0;
      const std::string where = named ? dir + m.substr(pipe.size()) : m;
      std::fprintf(stderr, "ferry-train: malformed line %s%s\n", where.c_str(), share.c_str());
    };
  }
  FERRY_ASSIGN_OR_RETURN(reader_, Reader::Open(r));
  FERRY_RETURN_IF_ERROR(OpenOutputs());
  if (lead_ && !o_.quiet && o_.progress != TrainOptions::Progress::kNever) {
    ProgressOptions po;
    po.tty = o_.progress == TrainOptions::Progress::kAlways || IsTerminal(STDERR_FILENO);
    progress_ = std::make_unique<ProgressDisplay>(std::cerr, po);
  }
  const uint64_t window = WindowSamples();
  Log("ferry-train: training on the stream " + InputName(o_.train_files.front()) +
      " (one pass; batch size " + std::to_string(o_.batch_size) + " per worker; a window every " +
      (window != UINT64_MAX ? std::to_string(window) + " samples" : std::string()) +
      (window != UINT64_MAX && o_.stream.window_seconds > 0 ? " or " : "") +
      (o_.stream.window_seconds > 0 ? Figure("%g", o_.stream.window_seconds) + " s" : "") +
      "; each sample scored before it is trained on)");
  return Status::Ok();
}

uint64_t WorkerLoop::WindowSamples() const {
  if (o_.stream.window_samples > 0) return o_.stream.window_samples;
  return o_.stream.window_seconds > 0 ? UINT64_MAX : StreamOptions::kDefaultWindowSamples;
}

Status WorkerLoop::RunStream(TrainReport* report) {
  FERRY_RETURN_IF_ERROR(SetupStream());
  FERRY_RETURN_IF_ERROR(ReadStraggler());
  start_ = window_start_ = TrainClock::now();
  SayJoined();
  FERRY_RETURN_IF_ERROR(LockstepStream(o_) ? TrainLockstep() : TrainStream());
  if (leaving_) return LeaveJob();  // SIGTERM: it goes, the job goes on
  if (lead_ && window_total_ == 0 && resumed_clock_ == 0) {
    return InvalidArgument("the stream " + InputName(o_.train_files.front()) +
                           " gave no training sample (" + std::to_string(reader_->stats().lines) +
                           " lines on worker 0, " + std::to_string(reader_->stats().malformed) +
                           " malformed)");
  }
  return Finish(/*last_epoch=*/1, report);
}

Status WorkerLoop::TrainStream() {
  const uint64_t window = WindowSamples();
  const uint64_t share =
      window == UINT64_MAX
          ? window
          : std::max<uint64_t>(1, (window + w_.num_workers() - 1) / w_.num_workers());
  const double seconds = o_.stream.window_seconds;
  // Without a dealer (a stream read by one worker under mpirun/srun) the worker itself stops at
  // --max-samples; a dealer cuts the stream there for every worker.
  const uint64_t limit =
      !StreamDealtHere() && o_.stream.max_samples > 0 ? o_.stream.max_samples : 0;
  Batch batches[2];
  Stepper::Slot slots[2];
  std::vector<float> probs;
  int cur = 0;
  if (!w_.join_slot() && w_.last_gather_id() != 0) {
    return Internal("the stream's windows must start at the job's first gather");
  }
  if (w_.join_slot() && w_.last_gather_id() % 2 == 1) {
    FERRY_RETURN_IF_ERROR(AllEnded(/*at_end=*/false).status());  // the round it joined in
  }
  const auto next_batch = [&](Batch* b) -> Result<size_t> {
    b->Clear();
    uint64_t want = o_.batch_size;
    if (limit > 0) want = std::min<uint64_t>(want, limit - std::min(limit, read_));
    if (want == 0) return size_t{0};
    FERRY_ASSIGN_OR_RETURN(size_t n, reader_->Next(want, b));
    read_ += n;
    return n;
  };
  FERRY_ASSIGN_OR_RETURN(size_t n, next_batch(&batches[cur]));
  if (n > 0) FERRY_RETURN_IF_ERROR(step_.Begin(batches[cur], &slots[cur], Stepper::Use::kTrain));
  while (n > 0) {
    const TrainClock::time_point began = TrainClock::now();
    // The next batch's pulls overlap this one's compute, as in TrainPipelined.
    const int nxt = 1 - cur;
    auto next_n = next_batch(&batches[nxt]);
    Status s = next_n.status();
    if (s.ok() && *next_n > 0) s = step_.Begin(batches[nxt], &slots[nxt], Stepper::Use::kTrain);
    if (!s.ok()) {
      step_.Abandon(&slots[cur]);
      return s;
    }
    // The probabilities come from the rows pulled before this batch's push: the model that has
    // not seen these samples yet.
    auto loss = step_.Finish(&slots[cur], true, &probs);
    if (!loss.ok()) {
      if (*next_n > 0) step_.Abandon(&slots[nxt]);
      return loss.status();
    }
    AddToWindow(batches[cur], *loss, probs);
    Straggle(began);
    // A leave takes effect at the end of what it was dealt; its word goes to the dealer now,
    // before a window's round that may wait for input the dealer holds back for it.
    (void)Leaving();
    n = *next_n;
    cur = nxt;
    // By time, every worker closes at about the same moment (each round restarts every
    // worker's clock); one that is still waiting for input joins the round when a batch comes.
    if (window_.count >= share || (seconds > 0 && SecondsSince(window_start_) >= seconds)) {
      Status w = CloseWindow(/*at_end=*/false).status();
      if (w.ok()) w = MaybeExport();
      if (!w.ok()) {
        if (n > 0) step_.Abandon(&slots[cur]);
        return w;
      }
    }
    ShowProgress();
  }
  // A leaving worker's last window, with the round the others make then; it goes after it.
  if (leaving_) return CloseWindow(/*at_end=*/true).status();
  // The end of this worker's input: rounds go on until every worker is at its end.
  while (true) {
    FERRY_ASSIGN_OR_RETURN(bool all_done, CloseWindow(/*at_end=*/true));
    if (all_done) break;
  }
  return Status::Ok();
}

void WorkerLoop::AddToWindow(const Batch& b, double loss, const std::vector<float>& probs) {
  Account(loss, b.size());
  window_.count += b.size();
  window_.loss_sum += loss;
  for (size_t i = 0; i < b.size(); ++i) {
    window_.prob_sum += probs[i];
    window_.label_sum += b.labels[i];
  }
  window_.scores.insert(window_.scores.end(), probs.begin(), probs.begin() + b.size());
  window_.labels.insert(window_.labels.end(), b.labels.begin(), b.labels.end());
}

Result<bool> WorkerLoop::CloseWindow(bool at_end) {
  // Pushes of the window are posted, not necessarily applied: the window scores what each
  // sample met, and the model statistics lag by the pushes in flight.
  FERRY_ASSIGN_OR_RETURN(auto parts, w_.GatherFromWorkers(window_.Encode(), /*to_all=*/false));
  window_ = EvalPart{};
  const double seconds = SecondsSince(window_start_);
  window_start_ = TrainClock::now();
  FERRY_ASSIGN_OR_RETURN(const bool all_done, AllEnded(at_end));
  if (lead_) FERRY_RETURN_IF_ERROR(ReportWindow(parts, seconds));
  return all_done;
}

Result<bool> WorkerLoop::AllEnded(bool at_end) {
  const uint64_t mine = at_end ? 1 : 0;
  FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> done,
                         GatherSums(w_, mine, /*to_all=*/true, "bad end flag from a worker"));
  return std::all_of(done.begin(), done.end(), [](uint64_t d) { return d != 0; });
}

Status WorkerLoop::ReportWindow(const std::vector<std::vector<uint8_t>>& parts, double seconds) {
  EvalPart all;
  for (const auto& bytes : parts) {
    if (bytes.empty()) continue;  // a worker join slot not joined, a worker that left
    FERRY_ASSIGN_OR_RETURN(EvalPart p, EvalPart::Decode(bytes));
    all.Merge(p);
  }
  if (all.count == 0) return Status::Ok();  // a round of workers at their end
  const EvalMetrics m = MetricsOf(all, /*with_auc=*/true);
  const ProbabilityErrors e = ProbabilityErrorsOf(all);
  window_total_ += all.count;
  ++windows_;
  last_auc_ = m.auc;
  const double rate = seconds > 0 ? static_cast<double>(all.count) / seconds : 0;
  MetricsLine line("window");
  line.Set("window", windows_);
  line.Set("samples", window_total_);
  line.Set("window_samples", all.count);
  line.Set("logloss", m.logloss);
  line.Set("auc", m.auc);
  line.Set("calibration", m.calibration);
  line.Set("positive_rate", m.positive_rate);
  line.Set("rmse", e.rmse);
  line.Set("mae", e.mae);
  line.Set("samples_per_sec", rate);
  line.Set("elapsed_s", SecondsSince(start_));
  FERRY_ASSIGN_OR_RETURN(const uint64_t rows, AddTableStats(&line));
  if (metrics_) FERRY_RETURN_IF_ERROR(metrics_->Write(line));
  Log("window " + std::to_string(windows_) + "  samples " + std::to_string(window_total_) +
      "  logloss " + Figure("%.5f", m.logloss) + "  auc " + Figure("%.5f", m.auc) +
      "  calibration " + Figure("%.3f", m.calibration) + "  rmse " + Figure("%.4f", e.rmse) +
      "  mae " + Figure("%.4f", e.mae) + "  " + Figure("%.0f", rate) + " samples/s  rows " +
      std::to_string(rows));
  return Status::Ok();
}

Result<uint64_t> WorkerLoop::AddTableStats(MetricsLine* line) {
  // Counters since the job started, from the servers; the window's are the differences.
  FERRY_ASSIGN_OR_RETURN(std::vector<ps::TableStats> now, w_.TableStats());
  const std::vector<ps::TableSpec>& tables = w_.job().tables;
  if (now.size() != tables.size()) return ProtocolError("table statistics for another job");
  last_table_stats_.resize(now.size());
  uint64_t rows = 0, bytes = 0;
  for (size_t t = 0; t < now.size(); ++t) {
    const ps::TableStats& n = now[t];
    const ps::TableStats& before = last_table_stats_[t];
    const std::string key = "table." + tables[t].name + ".";
    line->Set(key + "rows", n.live_rows);
    line->Set(key + "admitted", n.admitted - std::min(n.admitted, before.admitted));
    line->Set(key + "evicted", n.evicted - std::min(n.evicted, before.evicted));
    line->Set(key + "refused", n.refused - std::min(n.refused, before.refused));
    line->Set(key + "bytes", n.bytes_resident);
    rows += n.live_rows;
    bytes += n.bytes_resident;
  }
  line->Set("rows", rows);
  line->Set("bytes_resident", bytes);
  last_table_stats_ = std::move(now);
  return rows;
}

}  // namespace ferry::models
