// Elastic jobs at a worker (see worker.h): a worker join slot joining the running job
// (ConnectJoining, StartAt), a worker stopping its clocks or leaving the job (StopClocks, Leave,
// and Finish's common end, EndWith), and work dealing (TakeWork).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ps/worker/worker.h"
#include "ps/worker/worker_state.h"

namespace ferry::ps {

Status Worker::ConnectJoining(const std::vector<MemberInfo>& members,
                              std::span<const uint8_t> chains, ControlClient* control,
                              Millis timeout) {
  control_ = control;
  ChainMap c;
  if (!c.Decode(chains) || c.members() != chain_.members() || c.shards() != chain_.shards()) {
    return ProtocolError("worker " + std::to_string(index_) +
                         ": the membership's chains do not fit this job");
  }
  chain_ = std::move(c);
  State& st = *st_;
  st.servers.resize(job_.server_members());
  // Every live server of the chains, and only those, is named (a removed one never again).
  for (const MemberInfo& m : members) {
    if (m.role != Role::kServer) continue;
    if (m.index >= st.servers.size() || chain_.dead(m.index)) {
      return ProtocolError("worker " + std::to_string(index_) +
                           ": the membership names a server the chains do not hold alive");
    }
    st.servers[m.index].member = m;
    FERRY_RETURN_IF_ERROR(ConnectServer(m.index, timeout));
  }
  for (uint32_t s = 0; s < st.servers.size(); ++s) {
    if (!chain_.dead(s) && st.servers[s].ep == nullptr) {
      return ProtocolError("worker " + std::to_string(index_) + ": the membership lacks server " +
                           std::to_string(s));
    }
  }
  return Status::Ok();
}

Status Worker::StartAt(const ControlMessage& start) {
  Result<std::vector<uint32_t>> running = DecodeWorkerSet(start.data, job_.worker_members());
  if (!running.ok())
    return running.status().Annotate("the coordinator's start of a joining worker");
  clock_ = min_clock_ = start.value;
  State& st = *st_;
  st.barrier_id = start.value2;
  st.gather_id = start.index;
  st.gather_member.assign(job_.worker_members(), false);
  for (uint32_t w : *running) st.gather_member[w] = true;
  st.gather_member[index_] = true;
  return Status::Ok();
}

Status Worker::StopClocks() {
  FERRY_RETURN_IF_ERROR(Usable());
  if (clocks_stopped_) return Status::Ok();
  if (job_.consistency.kind == Consistency::kBsp && pushes_since_clock_ > 0) {
    FERRY_RETURN_IF_ERROR(Clock());
  }
  FERRY_RETURN_IF_ERROR(WaitAllReplies("the requests before the clocks stop"));
  clocks_stopped_ = true;
  ControlMessage m;
  m.kind = ControlKind::kFinish;
  m.rank = kFinishClocks;
  return control_->Send(m);
}

Status Worker::Leave(std::span<const uint8_t> farewell) {
  if (!job_.elastic) {
    return InvalidArgument("worker " + std::to_string(index_) +
                           ": only an elastic job's workers may leave it while it runs");
  }
  if (farewell.size() > kMaxFarewell) {
    return InvalidArgument("a farewell of " + std::to_string(farewell.size()) + " bytes (at most " +
                           std::to_string(kMaxFarewell) + ")");
  }
  return EndWith(kFinishLeave, farewell);
}

uint64_t Worker::last_gather_id() const {
  return st_->gather_id;
}

const std::map<uint32_t, std::vector<uint8_t>>& Worker::farewells() const {
  return st_->farewells;
}

Status Worker::EndWith(uint32_t rank, std::span<const uint8_t> data) {
  if (!st_->failure.ok()) return st_->failure;
  if (st_->shutdown) return Status::Ok();  // finished before (Node::Join calls it again)
  // BSP applies pushes only at clock boundaries: pushes made after the last Clock() would be
  // lost, so they get one.
  if (job_.consistency.kind == Consistency::kBsp && pushes_since_clock_ > 0 && !clocks_stopped_) {
    FERRY_RETURN_IF_ERROR(Clock());
  }
  FERRY_RETURN_IF_ERROR(WaitAllReplies("the last requests"));
  ControlMessage m;
  m.kind = ControlKind::kFinish;
  m.rank = rank;
  m.data.assign(data.begin(), data.end());
  FERRY_RETURN_IF_ERROR(control_->Send(m));
  // Not WaitFor: once every worker finished, the coordinator sends kShutdown to all members at
  // once, and a server may act on it and close its data connections before this worker's copy
  // arrives. A closed server connection is therefore no failure here; the coordinator's word
  // is (a server that really died is reported as kFailure, and a lost coordinator fails the
  // control connection: DrainControl turns both into st_->failure). A leaving worker hears
  // kShutdown once the servers were told it leaves.
  while (true) {
    const size_t n = Progress();
    if (st_->shutdown) return Status::Ok();
    if (!st_->failure.ok()) return st_->failure;
    if (n == 0) (void)data_->Wait(Millis(100));
  }
}

Result<std::optional<uint64_t>> Worker::TakeWork(uint64_t pass, uint64_t items) {
  FERRY_RETURN_IF_ERROR(Usable());
  if (items == 0 || items > kMaxWorkItems) {
    return InvalidArgument("a pass of work has 1.." + std::to_string(kMaxWorkItems) +
                           " items, not " + std::to_string(items));
  }
  State& st = *st_;
  st.work_taken.reset();
  ControlMessage m;
  m.kind = ControlKind::kWorkTake;
  m.value = pass;
  m.value2 = items;
  FERRY_RETURN_IF_ERROR(control_->Send(m));
  FERRY_RETURN_IF_ERROR(WaitFor([&st] { return st.work_taken.has_value(); }, job_.startup_timeout,
                                "the coordinator's answer to a work request"));
  const ControlMessage r = std::move(*st.work_taken);
  st.work_taken.reset();
  if (!r.text.empty()) return InvalidArgument("work dealing: " + r.text);
  if (r.value != pass || (r.value2 != kNoWork && r.value2 >= items)) {
    return ProtocolError("the coordinator dealt item " + std::to_string(r.value2) + " of pass " +
                         std::to_string(r.value) + " for pass " + std::to_string(pass));
  }
  if (r.value2 == kNoWork) return std::optional<uint64_t>();
  return std::optional<uint64_t>(r.value2);
}

}  // namespace ferry::ps
