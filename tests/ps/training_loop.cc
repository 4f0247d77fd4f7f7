#include "tests/ps/training_loop.h"

#include "tests/ps/job_util.h"

namespace ferry::ps::testing {

std::vector<uint64_t> TrainingKeys(const TrainingSpec& spec) {
  std::vector<uint64_t> keys(spec.keys);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 0x9e3779b97f4a7c15ull;
  return keys;
}

Status TrainOnRank(Node& node, const TrainingSpec& spec, std::vector<float>* final_rows,
                   std::mutex* mu) {
  Worker* w = node.worker();
  if (w == nullptr) return Status::Ok();
  const uint32_t dim = spec.dim;
  const std::vector<uint64_t> keys = TrainingKeys(spec);
  std::vector<float> grads(keys.size() * dim, 1.0f / 64);
  for (int it = 0; it < spec.iterations; ++it) {
    FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(p));
    FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(p));
    if (!spec.constant) {
      for (size_t i = 0; i < keys.size(); ++i) {
        for (uint32_t d = 0; d < dim; ++d) {
          grads[i * dim + d] = rows[i][d] * 0.5f + static_cast<float>(w->index() + it + d) * 0.01f;
        }
      }
    }
    w->Release(p);
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, grads));
    FERRY_RETURN_IF_ERROR(w->Clock());
    if (spec.after_clock) FERRY_RETURN_IF_ERROR(spec.after_clock(*w, it));
  }
  FERRY_RETURN_IF_ERROR(w->Barrier());
  FERRY_ASSIGN_OR_RETURN(Ticket r, w->Pull(0, keys));
  FERRY_RETURN_IF_ERROR(w->Wait(r));
  FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(r));
  if (w->index() == 0) {
    std::lock_guard<std::mutex> lock(*mu);
    final_rows->clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      final_rows->insert(final_rows->end(), rows[i], rows[i] + dim);
    }
  }
  w->Release(r);
  return w->Finish();
}

TrainingRun RunTraining(const JobSpec& job, const TrainingSpec& spec) {
  TrainingRun run;
  std::mutex mu;
  run.outcomes =
      RunJob(job, [&](Node& node) { return TrainOnRank(node, spec, &run.final_rows, &mu); });
  run.ended = std::chrono::steady_clock::now();
  return run;
}

std::string DescribeOutcomes(const std::vector<RankOutcome>& out) {
  std::string s;
  for (size_t r = 0; r < out.size(); ++r) {
    s += "\n  rank " + std::to_string(r) + ": " + out[r].ToString();
  }
  return s;
}

std::shared_ptr<FaultReport> InjectFaults(JobSpec* job, Role role, uint32_t index, FaultPlan plan) {
  auto report = std::make_shared<FaultReport>();
  DataTransportWrapper before = job->wrap_data_transport;
  job->wrap_data_transport = [=](std::unique_ptr<Transport> t, Role r,
                                 uint32_t i) -> std::unique_ptr<Transport> {
    if (r != role || i != index) return before ? before(std::move(t), r, i) : std::move(t);
    auto f = std::make_unique<FaultTransport>(std::move(t), plan);
    f->OnDestroy([report](const FaultCounters& c) {
      report->wrapped = true;
      report->counters = c;
    });
    return f;
  };
  return report;
}

}  // namespace ferry::ps::testing
