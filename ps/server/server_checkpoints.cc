// Checkpoints on a server (see server.h): the copy of the shards it heads (the only pause; the
// files are written by a thread), emptying the tables, and restoring a shard from a checkpoint
// (ps/job/checkpoint.h, docs/ps.md "Checkpoints").
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "ps/job/checkpoint.h"
#include "ps/server/server.h"

namespace ferry::ps {

using Clock = std::chrono::steady_clock;

void Server::JoinCheckpointWriter() {
  if (checkpoint_writer_.joinable()) checkpoint_writer_.join();
}

void Server::ClearTables(const ControlMessage& command, ControlClient* control) {
  ControlMessage done;
  done.kind = ControlKind::kCheckpointDone;
  done.value = command.value;
  // Every hosted copy (own shards and replicas alike): the chain stays consistent. A reply still
  // reading a table's rows finishes first; Clear discards the pages and registers them anew.
  for (Table& t : tables_) {
    Status s = DrainTable(t);
    if (s.ok()) s = t.map->Clear();
    if (!s.ok()) {
      done.text = s.ToString();
      break;
    }
  }
  (void)control->Send(done);
}

void Server::StartCheckpoint(const ControlMessage& command, ControlClient* control) {
  if (command.value2 == kCheckpointClear) return ClearTables(command, control);
  if (command.value2 == kCheckpointStats) return SendTableStats(command, control);
  JoinCheckpointWriter();  // one write at a time: memory for two copies at most
  ControlMessage done;
  done.kind = ControlKind::kCheckpointDone;
  done.value = command.value;
  // The copy is the pause: serving resumes as soon as every table is copied, and the copies are
  // consistent with each other (nothing is applied in between).
  const auto start = Clock::now();
  // The shards this server heads (its own; with replicas also those it took over), each written
  // as that shard's file: a checkpoint holds every shard once, whoever heads it.
  std::vector<const Table*> heads;
  for (const Table& t : tables_) {
    if (chain_.Head(t.shard) == static_cast<int>(index_)) heads.push_back(&t);
  }
  checkpoint_images_.resize(heads.size());  // kept: the next capture reuses their memory
  uint64_t bytes = 0;
  for (size_t i = 0; i < heads.size(); ++i) {
    Status s = heads[i]->map->CaptureSnapshot(&checkpoint_images_[i]);
    if (!s.ok()) {
      done.text = s.Annotate("checkpoint table '" + heads[i]->spec.name + "'").ToString();
      (void)control->Send(done);
      return;
    }
    bytes += checkpoint_images_[i].bytes();
  }
  const auto pause = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start);
  ++stats_.checkpoints;
  stats_.checkpoint_pause_ns =
      std::max<uint64_t>(stats_.checkpoint_pause_ns, static_cast<uint64_t>(pause.count()));
  stats_.checkpoint_bytes = bytes;
  std::vector<std::string> paths;
  for (const Table* t : heads) paths.push_back(ShardPath(command.text, t->spec.name, t->shard));
  // The images are the writer's until it is joined (the next checkpoint, Serve's end).
  checkpoint_writer_ = std::thread(
      [control, done, images = &checkpoint_images_, paths = std::move(paths)]() mutable {
        for (size_t i = 0; i < images->size() && done.text.empty(); ++i) {
          Status s = (*images)[i].WriteTo(paths[i]);
          if (!s.ok()) done.text = s.ToString();
        }
        (void)control->Send(done);  // ControlClient::Send is thread-safe
      });
}

Status Server::RestoreTable(size_t t) {
  if (!restore_manifest_) {
    FERRY_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(job_.restore_dir));
    FERRY_RETURN_IF_ERROR(CheckManifestMatches(m, job_));
    restore_manifest_ = std::make_unique<CheckpointManifest>(std::move(m));
  }
  const CheckpointManifest& m = *restore_manifest_;
  FERRY_ASSIGN_OR_RETURN(Partition mine, Partition::Create(job_.num_shards(), job_.virtual_nodes,
                                                           job_.partition_seed));
  const std::string& name = job_.tables[t].name;
  size_t index = 0;
  while (m.tables[index].name != name) ++index;  // CheckManifestMatches found it
  // The table of each shard this server hosts (one pass over the checkpoint fills them all).
  std::vector<ArrayHashMap*> map_of(job_.num_shards(), nullptr);
  for (size_t i = t; i < tables_.size(); i += job_.tables.size()) {
    map_of[tables_[i].shard] = tables_[i].map.get();
  }
  const TableOptions options = ServerTableOptions(tables_[t].spec);
  const size_t row_bytes = tables_[t].map->layout().stride;
  // Every old shard's rows that this server owns under the new partition move here, with their
  // optimizer state and metadata (same layout: CheckManifestMatches).
  uint32_t tick = 0;
  FERRY_RETURN_IF_ERROR(ForEachCheckpointRow(
      job_.restore_dir, m, index, options,
      [&](uint64_t key, const uint8_t* row) -> Status {
        ArrayHashMap* map = map_of[mine.ServerOf(key)];
        if (map == nullptr) return Status::Ok();
        FERRY_ASSIGN_OR_RETURN(ArrayHashMap::Insertion ins, map->Insert(key));
        std::memcpy(ins.row + 8, row + 8, row_bytes - 8);
        ++stats_.rows_restored;
        return Status::Ok();
      },
      &tick));
  // Ages count on from the saved tick, not from 0: a row's last_seen past the table's tick would
  // wrap around and read as ancient (docs/ps.md "Admission and eviction", checkpoints).
  for (ArrayHashMap* map : map_of) {
    if (map != nullptr && tick > map->tick()) map->AdvanceTick(tick - map->tick());
  }
  return Status::Ok();
}

}  // namespace ferry::ps
