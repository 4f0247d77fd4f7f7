// Commands every server carries out for a worker, relayed by the coordinator as kCheckpoint
// (ps/wire/control.h): checkpoints, emptying the tables, and the tables' counters (see worker.h).
#include "ps/worker/worker.h"
#include "ps/worker/worker_state.h"

namespace ferry::ps {

Status Worker::Checkpoint(const std::string& dir) {
  if (dir.empty()) return InvalidArgument("checkpoint directory is empty");
  return ServerCommand(dir, 0, "checkpoint into " + dir);
}

Status Worker::ClearTables() {
  return ServerCommand("", kCheckpointClear, "emptying the tables");
}

Result<std::vector<ps::TableStats>> Worker::TableStats() {
  FERRY_RETURN_IF_ERROR(Usable());
  // No WaitAllReplies: counters are read between two requests on each server, whatever this
  // worker has in flight (a streaming loop asks once per metrics window without pausing).
  uint64_t id = 0;
  FERRY_RETURN_IF_ERROR(AskServers("", kCheckpointStats, "the tables' counters", &id));
  auto it = st_->table_stats_done.find(id);
  if (it == st_->table_stats_done.end() || it->second.size() != job_.tables.size()) {
    if (it != st_->table_stats_done.end()) st_->table_stats_done.erase(it);
    return ProtocolError("the tables' counters came back for the wrong number of tables");
  }
  std::vector<ps::TableStats> out = std::move(it->second);
  st_->table_stats_done.erase(it);
  return out;
}

Result<size_t> Worker::MoveShards(std::span<const ShardMove> moves) {
  ControlMessage m;
  m.data = EncodeMoves(moves);
  return AskMoves(std::move(m));
}

Result<size_t> Worker::RetireServer(uint32_t server) {
  ControlMessage m;
  m.rank = kMoveLeave;
  m.index = server;
  return AskMoves(std::move(m));
}

Result<size_t> Worker::AskMoves(ControlMessage m) {
  FERRY_RETURN_IF_ERROR(Usable());
  m.kind = ControlKind::kMoveShards;
  m.value = ++st_->checkpoint_id;
  FERRY_RETURN_IF_ERROR(control_->Send(m));
  const uint64_t want = m.value;
  FERRY_RETURN_IF_ERROR(WaitFor([this, want] { return st_->moves_done.count(want) != 0; },
                                Millis(3600000), "shard moves"));
  const ControlMessage done = std::move(st_->moves_done[want]);
  st_->moves_done.erase(want);
  if (!done.text.empty()) return Status(Code::kInvalidArgument, "shard moves: " + done.text);
  return static_cast<size_t>(done.value2);
}

Status Worker::ServerCommand(const std::string& dir, uint64_t mode, const std::string& what) {
  FERRY_RETURN_IF_ERROR(Usable());
  FERRY_RETURN_IF_ERROR(WaitAllReplies("the requests before " + what));
  uint64_t id = 0;
  return AskServers(dir, mode, what, &id);
}

Status Worker::AskServers(const std::string& dir, uint64_t mode, const std::string& what,
                          uint64_t* id) {
  *id = ++st_->checkpoint_id;
  ControlMessage m;
  m.kind = ControlKind::kCheckpoint;
  m.value = *id;
  m.value2 = mode;
  m.text = dir;
  FERRY_RETURN_IF_ERROR(control_->Send(m));
  const uint64_t want = *id;
  FERRY_RETURN_IF_ERROR(WaitFor([this, want] { return st_->checkpoints_done.count(want) != 0; },
                                Millis(3600000), what));
  const std::string error = std::move(st_->checkpoints_done[want]);
  st_->checkpoints_done.erase(want);
  if (!error.empty()) {
    st_->table_stats_done.erase(want);
    return Status(Code::kIoError, what + ": " + error);
  }
  return Status::Ok();
}

}  // namespace ferry::ps
