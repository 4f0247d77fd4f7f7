// Checkpoint manifests, shard paths and reading rows back (checkpoint.h).
#include "ps/job/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace ferry::ps {

TableOptions ServerTableOptions(const TableSpec& spec) {
  TableOptions o;
  o.dim = spec.dim;
  o.state_floats =
      StateFloats(spec.optimizer, spec.dim) + (spec.fp16_pull ? (spec.dim + 1) / 2 : 0);
  o.metadata = true;
  o.initial_rows = std::max<size_t>(spec.initial_rows, 64);
  o.max_rows = spec.max_rows;
  o.admission = spec.admission;
  o.score_half_life = spec.score_half_life;
  return o;
}

CheckpointManifest ManifestFor(const JobSpec& job, uint64_t clock) {
  CheckpointManifest m;
  m.servers = job.num_shards();  // one file per shard (and table)
  auto p = Partition::Create(job.num_shards(), job.virtual_nodes, job.partition_seed);
  m.partition_version = p.ok() ? p->version() : 0;
  m.virtual_nodes = job.virtual_nodes;
  m.partition_seed = job.partition_seed;
  m.clock = clock;
  for (const TableSpec& t : job.tables) {
    m.tables.push_back({t.name, t.dim, ServerTableOptions(t).state_floats});
  }
  return m;
}

std::string ShardPath(const std::string& dir, std::string_view table, uint32_t server) {
  return dir + "/" + std::string(table) + ".s" + std::to_string(server) + ".snap";
}

std::string EncodeManifest(const CheckpointManifest& m) {
  std::ostringstream o;
  o << "ferry-checkpoint 1\n";
  o << "servers " << m.servers << "\n";
  o << "partition " << m.partition_version << " " << m.virtual_nodes << " " << m.partition_seed
    << "\n";
  o << "clock " << m.clock << "\n";
  for (const auto& t : m.tables) {
    o << "table " << t.name << " " << t.dim << " " << t.state_floats << "\n";
  }
  if (!m.positions.empty()) {
    o << "workers " << m.positions.size() << "\n";
    for (size_t i = 0; i < m.positions.size(); ++i) {
      o << "position " << i << " " << m.positions[i] << "\n";
    }
  }
  o << "end\n";  // a manifest cut at a line boundary is still refused
  return o.str();
}

namespace {

template <typename T>
bool ParseNum(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> w;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) w.push_back(line.substr(i, j - i));
    i = j;
  }
  return w;
}

bool ValidName(std::string_view n) {
  if (n.empty() || n.size() > 200) return false;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

Result<CheckpointManifest> ParseManifest(std::string_view text) {
  CheckpointManifest m;
  size_t line_no = 0;
  bool have_servers = false, have_partition = false, have_clock = false, ended = false;
  uint32_t workers = 0;
  std::vector<bool> have_position;
  size_t pos = 0;
  auto bad = [&](const std::string& why) {
    return ProtocolError("checkpoint manifest line " + std::to_string(line_no) + ": " + why);
  };
  if (text.size() > (1u << 20)) return ProtocolError("checkpoint manifest is larger than 1 MiB");
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      ++line_no;
      return bad("the last line has no newline (truncated?)");
    }
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const auto w = Words(line);
    if (ended) return bad("text after the end line");
    if (line_no == 1) {
      if (w.size() != 2 || w[0] != "ferry-checkpoint" || w[1] != "1") {
        return bad("not a ferry checkpoint manifest (version 1)");
      }
      continue;
    }
    if (w.empty()) return bad("empty line");
    if (w.size() == 1 && w[0] == "end") {
      ended = true;
    } else if (w[0] == "servers" && w.size() == 2 && ParseNum(w[1], &m.servers) && m.servers > 0 &&
               m.servers <= Partition::kMaxServers) {
      have_servers = true;
    } else if (w[0] == "partition" && w.size() == 4 && ParseNum(w[1], &m.partition_version) &&
               ParseNum(w[2], &m.virtual_nodes) && ParseNum(w[3], &m.partition_seed)) {
      have_partition = true;
    } else if (w[0] == "clock" && w.size() == 2 && ParseNum(w[1], &m.clock)) {
      have_clock = true;
    } else if (w[0] == "table" && w.size() == 4) {
      CheckpointManifest::Table t;
      t.name = std::string(w[1]);
      if (!ValidName(t.name) || !ParseNum(w[2], &t.dim) || !ParseNum(w[3], &t.state_floats) ||
          t.dim == 0 || t.dim > (1u << 20) || t.state_floats > 4 * (1u << 20)) {
        return bad("malformed table line");
      }
      if (m.tables.size() >= 65535) return bad("too many tables");
      m.tables.push_back(std::move(t));
    } else if (w[0] == "workers" && w.size() == 2 && workers == 0 && ParseNum(w[1], &workers) &&
               workers > 0 && workers <= 65535) {
      m.positions.assign(workers, 0);
      have_position.assign(workers, false);
    } else if (w[0] == "position" && w.size() == 3) {
      uint32_t i = 0;
      uint64_t p = 0;
      if (!ParseNum(w[1], &i) || !ParseNum(w[2], &p)) return bad("malformed position line");
      if (i >= workers)
        return bad("position of worker " + std::to_string(i) + " of " + std::to_string(workers) +
                   " (a workers line comes first)");
      if (have_position[i]) return bad("worker " + std::to_string(i) + "'s position twice");
      have_position[i] = true;
      m.positions[i] = p;
    } else {
      return bad("unknown or malformed line '" + std::string(line.substr(0, 60)) + "'");
    }
  }
  if (line_no == 0) return ProtocolError("checkpoint manifest is empty");
  for (size_t i = 0; i < have_position.size(); ++i) {
    if (!have_position[i]) {
      return ProtocolError("checkpoint manifest lacks worker " + std::to_string(i) + "'s position");
    }
  }
  if (!have_servers || !have_partition || !have_clock || m.tables.empty() || !ended) {
    return ProtocolError(
        "checkpoint manifest lacks its servers, partition, clock, tables or end line "
        "(truncated?)");
  }
  return m;
}

namespace {

constexpr std::string_view kPeriodicPrefix = "clock-";

// The clock of a periodic checkpoint's name, or nullopt.
std::optional<uint64_t> PeriodicClock(std::string_view name) {
  if (name.substr(0, kPeriodicPrefix.size()) != kPeriodicPrefix) return std::nullopt;
  uint64_t c = 0;
  if (!ParseNum(name.substr(kPeriodicPrefix.size()), &c)) return std::nullopt;
  return c;
}

}  // namespace

Status WriteFileAtomic(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("create " + tmp, errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      return IoError("write " + tmp, e);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return IoError("fsync " + tmp, e);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return IoError("rename " + tmp, errno);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return IoError("open directory " + dir, errno);
  const int rc = ::fsync(dfd);
  const int e = errno;
  ::close(dfd);
  return rc == 0 ? Status::Ok() : IoError("fsync directory " + dir, e);
}

Status WriteManifest(const std::string& dir, const CheckpointManifest& m) {
  return WriteFileAtomic(dir, "MANIFEST", EncodeManifest(m));
}

std::string PeriodicCheckpointName(uint64_t clock) {
  return std::string(kPeriodicPrefix) + std::to_string(clock);
}

Result<std::string> ResolveCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir + "/MANIFEST", ec)) return dir;
  const std::string latest = dir + "/LATEST";
  std::ifstream in(latest, std::ios::binary);
  if (!in) {
    return NotFound("no checkpoint at " + dir + " (neither " + dir + "/MANIFEST nor " + latest +
                    " exists: no checkpoint completed there, or the path is wrong)");
  }
  std::string name;
  std::getline(in, name);
  if (!PeriodicClock(name) || !ValidName(name)) {
    return ProtocolError(latest + " does not name a checkpoint ('" + name.substr(0, 60) + "')");
  }
  return dir + "/" + name;
}

Status CommitLatest(const std::string& dir, const std::string& name, uint32_t keep) {
  const auto committed = PeriodicClock(name);
  if (!committed) return InvalidArgument("'" + name + "' is not a periodic checkpoint name");
  FERRY_RETURN_IF_ERROR(WriteFileAtomic(dir, "LATEST", name + "\n"));
  std::vector<uint64_t> clocks;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const auto c = PeriodicClock(e.path().filename().string());
    if (c && *c <= *committed) clocks.push_back(*c);
  }
  std::sort(clocks.rbegin(), clocks.rend());
  for (size_t i = keep; i < clocks.size(); ++i) {
    std::filesystem::remove_all(dir + "/" + PeriodicCheckpointName(clocks[i]), ec);
    if (ec) {
      return Status(Code::kIoError, "delete old checkpoint " + PeriodicCheckpointName(clocks[i]) +
                                        ": " + ec.message());
    }
  }
  return Status::Ok();
}

Result<CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = dir + "/MANIFEST";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFound("no checkpoint at " + dir + " (" + path +
                    " is missing: the checkpoint never completed, or the path is wrong)");
  }
  std::ostringstream s;
  s << in.rdbuf();
  auto m = ParseManifest(s.str());
  if (!m.ok()) return m.status().Annotate(path);
  return m;
}

Status CheckManifestMatches(const CheckpointManifest& m, const JobSpec& job) {
  for (const TableSpec& t : job.tables) {
    const uint32_t state = ServerTableOptions(t).state_floats;
    auto it = std::find_if(m.tables.begin(), m.tables.end(),
                           [&](const CheckpointManifest::Table& x) { return x.name == t.name; });
    if (it == m.tables.end()) {
      return InvalidArgument("the checkpoint has no table '" + t.name + "'");
    }
    if (it->dim != t.dim || it->state_floats != state) {
      return InvalidArgument("table '" + t.name + "' is " + std::to_string(it->dim) +
                             " wide with " + std::to_string(it->state_floats) +
                             " state floats in the checkpoint, " + std::to_string(t.dim) + " and " +
                             std::to_string(state) +
                             " in this job (same optimizer and width needed)");
    }
  }
  return Status::Ok();
}

Status ForEachCheckpointRow(const std::string& dir, const CheckpointManifest& m, size_t t,
                            const TableOptions& options,
                            const std::function<Status(uint64_t key, const uint8_t* row)>& fn,
                            uint32_t* tick) {
  if (t >= m.tables.size()) return InvalidArgument("no such table in the checkpoint");
  TableOptions o = options;
  o.dim = m.tables[t].dim;
  o.state_floats = m.tables[t].state_floats;
  o.metadata = true;
  o.max_rows = 0;
  for (uint32_t s = 0; s < m.servers; ++s) {
    const std::string path = ShardPath(dir, m.tables[t].name, s);
    auto shard = ArrayHashMap::LoadSnapshot(path, o);
    if (!shard.ok()) return shard.status().Annotate("checkpoint shard " + path);
    if (tick != nullptr) *tick = std::max(*tick, (*shard)->tick());
    Status status;
    (*shard)->ForEach([&](uint32_t, const uint8_t* row) {
      if (status.ok()) status = fn(ArrayHashMap::RowKey(row), row);
    });
    FERRY_RETURN_IF_ERROR(status);
  }
  return Status::Ok();
}

}  // namespace ferry::ps
