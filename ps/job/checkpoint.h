// Checkpoints of the servers' shards, and restoring them into a job of any server count.
//
// Layout of a checkpoint directory (on a file system every server and the coordinator reach):
//   DIR/<table>.s<shard>.snap   ArrayHashMap::SaveSnapshot of one shard of one table, written
//                               by the shard's head (rows with their optimizer state and
//                               metadata, checksummed)
//   DIR/MANIFEST                written last, atomically (tmp + rename): the checkpoint exists
//                               once it does. Text:
//                                 ferry-checkpoint 1
//                                 servers Q      (the shards: JobSpec::num_shards(), one per
//                                                 shard server unless JobSpec::shards says more)
//                                 partition VERSION VNODES SEED
//                                 clock C
//                                 table NAME DIM STATE_FLOATS     (one line per table, in order)
//                                 workers W                       (optional, with the positions)
//                                 position I P                    (worker I's data position at
//                                                                  clock C: one per worker)
//                                 end
//
// Periodic checkpoints (JobSpec::checkpoint_every) live in subdirectories of one directory:
//   DIR/clock-C/                one checkpoint as above, taken at clock boundary C
//   DIR/LATEST                  the name of the newest complete one ("clock-C\n"), replaced
//                               atomically after its manifest is written; older ones beyond
//                               JobSpec::checkpoints_kept are deleted after that.
// ResolveCheckpoint(DIR) accepts either form, so `--resume DIR` takes both.
//
// Restoring (JobSpec::restore_dir): each server of the new job reads every old shard of every
// table once and keeps the rows of the shards it hosts under its partition, so rows move to their
// new owners when the server or shard count changes; the optimizer state moves with them. The
// manifest's tables must match the job's (name, width, state layout), or the restore is refused
// naming the table.
//
// Thread-safety: pure functions over files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ps/job/job.h"
#include "ps/job/partition.h"
#include "ps/store/array_hash_map.h"

namespace ferry::ps {

struct CheckpointManifest {
  uint32_t servers = 0;  // shard files per table (the job's num_shards(); named for the format)
  uint64_t partition_version = 0;
  uint32_t virtual_nodes = 0;
  uint64_t partition_seed = 0;
  uint64_t clock = 0;
  struct Table {
    std::string name;
    uint32_t dim = 0;
    uint32_t state_floats = 0;
    bool operator==(const Table&) const = default;
  };
  std::vector<Table> tables;
  // Worker i's data position (what it passed to Worker::Clock) at `clock`; empty when the
  // checkpoint was not taken at a clock boundary of a job whose workers report positions.
  std::vector<uint64_t> positions;
};

// The server-side row layout of a job's table (what the shard files hold).
TableOptions ServerTableOptions(const TableSpec& spec);
CheckpointManifest ManifestFor(const JobSpec& job, uint64_t clock);

std::string ShardPath(const std::string& dir, std::string_view table, uint32_t server);
std::string EncodeManifest(const CheckpointManifest& m);
// kProtocol naming the line for anything malformed (fuzzed).
Result<CheckpointManifest> ParseManifest(std::string_view text);
Status WriteManifest(const std::string& dir, const CheckpointManifest& m);
// Writes `text` to dir/name through a temporary file, fsync and rename, then fsyncs the
// directory: a crash leaves the old file or the new one, never a torn one.
Status WriteFileAtomic(const std::string& dir, const std::string& name, const std::string& text);
Result<CheckpointManifest> ReadManifest(const std::string& dir);
// kInvalidArgument naming the first table of `job` the manifest lacks or lays out differently.
Status CheckManifestMatches(const CheckpointManifest& m, const JobSpec& job);

// The checkpoint DIR names: DIR itself when it holds a MANIFEST, else DIR/<LATEST's name>.
// kNotFound naming both paths when neither exists.
Result<std::string> ResolveCheckpoint(const std::string& dir);
// Name of the periodic checkpoint of `clock` (a subdirectory of JobSpec::checkpoint_dir).
std::string PeriodicCheckpointName(uint64_t clock);
// Points DIR/LATEST at DIR/`name` (atomically), then deletes the periodic checkpoints of DIR
// older than the `keep` newest.
Status CommitLatest(const std::string& dir, const std::string& name, uint32_t keep);

// Calls fn(key, row) for every live row of table `t` in every shard of the checkpoint.
// `row` is the server row (ArrayHashMap layout `options`), valid during the call. When `tick`
// is given it receives the newest table tick of the shards (ArrayHashMap::tick at the save).
Status ForEachCheckpointRow(const std::string& dir, const CheckpointManifest& m, size_t t,
                            const TableOptions& options,
                            const std::function<Status(uint64_t key, const uint8_t* row)>& fn,
                            uint32_t* tick = nullptr);

}  // namespace ferry::ps
