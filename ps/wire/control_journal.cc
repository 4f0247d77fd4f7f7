// A member's control journal (control_journal.h).
#include "ps/wire/control_journal.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace ferry::ps {

namespace {

// The journal's fixed part: flags, then the numbers, little-endian u64 each.
constexpr uint64_t kStarted = 1, kShutdown = 2, kFinished = 4, kClockCheckpointFlag = 8;
constexpr size_t kFixedWords = 11;

void AppendWord(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t WordAt(std::span<const uint8_t> bytes, size_t word) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{bytes[word * 8 + i]} << (8 * i);
  return v;
}

}  // namespace

void ControlJournal::Sent(const ControlMessage& m) {
  switch (m.kind) {
    case ControlKind::kRegister:
      rank = m.rank;
      role = m.role;
      index = m.index;
      fingerprint = m.value;
      break;
    case ControlKind::kClock:
      if (m.value > clock) {
        clock = m.value;
        position = m.value2;
        clock_checkpoint = m.rank == kClockCheckpoint;
      }
      break;
    case ControlKind::kBarrier:
      barrier_sent = std::max(barrier_sent, m.value);
      break;
    case ControlKind::kFinish:
      finished = true;
      break;
    case ControlKind::kGather: {
      // Gather ids count up per worker: keep the newest few gathers' parts.
      replay.push_back(m);
      std::erase_if(replay, [&](const ControlMessage& r) {
        return r.kind == ControlKind::kGather && r.value + kReplayGathers <= m.value;
      });
      break;
    }
    case ControlKind::kCheckpoint:
      replay.push_back(m);
      break;
    default:
      break;
  }
}

void ControlJournal::Heard(const ControlMessage& m) {
  switch (m.kind) {
    case ControlKind::kMembership:
      membership = m.members;
      standby = m.text;
      break;
    case ControlKind::kStart:
      started = true;
      break;
    case ControlKind::kShutdown:
      shutdown = true;
      break;
    case ControlKind::kClockUpdate:
      min_clock = std::max(min_clock, m.value);
      break;
    case ControlKind::kApplyClock:
      if (m.value > apply_clock) {
        apply_clock = m.value;
        apply_without = m.data;
      }
      break;
    case ControlKind::kServerDown:
      servers_down.insert(m.index);
      break;
    case ControlKind::kChainRepair:
      repairs.emplace_back(m.index, static_cast<uint32_t>(m.value));
      break;
    case ControlKind::kChainJoined:
      joined.insert(m.index);
      break;
    case ControlKind::kBarrierRelease:
      barrier_released = std::max(barrier_released, m.value);
      break;
    case ControlKind::kCheckpointDone:
      std::erase_if(replay, [&](const ControlMessage& r) {
        return r.kind == ControlKind::kCheckpoint && r.value == m.value;
      });
      break;
    default:
      break;
  }
}

bool ControlJournal::Covers(ControlKind kind) {
  switch (kind) {
    case ControlKind::kRegister:
    case ControlKind::kReady:
    case ControlKind::kBarrier:
    case ControlKind::kClock:
    case ControlKind::kGather:
    case ControlKind::kFinish:
    case ControlKind::kCheckpoint:
    // A server's answers: the new coordinator asks again (kApplyClock is answered again by a
    // server that applied it; a checkpoint the worker asks again is written again).
    case ControlKind::kClockApplied:
    case ControlKind::kCheckpointDone:
      return true;
    default:
      return false;  // kSuspect, kFailure: what the member saw still counts
  }
}

ControlMessage ControlJournal::Rejoin() const {
  ControlMessage m;
  m.kind = ControlKind::kRejoin;
  m.rank = rank;
  m.role = role;
  m.index = index;
  m.value = fingerprint;
  m.members = membership;
  m.data = EncodeJournal(*this);
  return m;
}

std::vector<uint8_t> EncodeJournal(const ControlJournal& j) {
  std::vector<uint8_t> out;
  const uint64_t flags = (j.started ? kStarted : 0) | (j.shutdown ? kShutdown : 0) |
                         (j.finished ? kFinished : 0) |
                         (j.clock_checkpoint ? kClockCheckpointFlag : 0);
  for (uint64_t w :
       {flags, j.min_clock, j.apply_clock, j.barrier_released, j.clock, j.position, j.barrier_sent,
        uint64_t{j.servers_down.size()}, uint64_t{j.apply_without.size()},
        uint64_t{j.repairs.size()}, uint64_t{j.joined.size()}}) {
    AppendWord(&out, w);
  }
  // Server lists in the worker set's 4-byte index format.
  const auto append = [&out](std::span<const uint32_t> list) {
    const std::vector<uint8_t> set = EncodeWorkerSet(list);
    out.insert(out.end(), set.begin(), set.end());
  };
  append(std::vector<uint32_t>(j.servers_down.begin(), j.servers_down.end()));
  out.insert(out.end(), j.apply_without.begin(), j.apply_without.end());
  std::vector<uint32_t> repairs;
  for (const auto& [dead, spare] : j.repairs) repairs.insert(repairs.end(), {dead, spare});
  append(repairs);
  append(std::vector<uint32_t>(j.joined.begin(), j.joined.end()));
  return out;
}

Result<ControlJournal> DecodeRejoin(const ControlMessage& m, uint32_t servers, uint32_t workers) {
  if (m.kind != ControlKind::kRejoin) return ProtocolError("not a rejoin message");
  const std::span<const uint8_t> bytes(m.data);
  if (bytes.size() < kFixedWords * 8) {
    return ProtocolError("a rejoin journal of " + std::to_string(bytes.size()) +
                         " bytes is truncated");
  }
  ControlJournal j;
  j.rank = m.rank;
  j.role = m.role;
  j.index = m.index;
  j.fingerprint = m.value;
  j.membership = m.members;
  const uint64_t flags = WordAt(bytes, 0);
  if ((flags & ~(kStarted | kShutdown | kFinished | kClockCheckpointFlag)) != 0) {
    return ProtocolError("a rejoin journal with unknown flags");
  }
  j.started = (flags & kStarted) != 0;
  j.shutdown = (flags & kShutdown) != 0;
  j.finished = (flags & kFinished) != 0;
  j.clock_checkpoint = (flags & kClockCheckpointFlag) != 0;
  j.min_clock = WordAt(bytes, 1);
  j.apply_clock = WordAt(bytes, 2);
  j.barrier_released = WordAt(bytes, 3);
  j.clock = WordAt(bytes, 4);
  j.position = WordAt(bytes, 5);
  j.barrier_sent = WordAt(bytes, 6);
  const uint64_t down = WordAt(bytes, 7), without = WordAt(bytes, 8);
  const uint64_t repairs = WordAt(bytes, 9), joined = WordAt(bytes, 10);
  const std::span<const uint8_t> rest = bytes.subspan(kFixedWords * 8);
  if (down > servers || without > uint64_t{workers} * 4 || repairs > servers || joined > repairs ||
      rest.size() != down * 4 + without + repairs * 8 + joined * 4) {
    return ProtocolError("a rejoin journal's lists do not match its " +
                         std::to_string(bytes.size()) + " bytes");
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<uint32_t> dead,
                         DecodeWorkerSet(rest.subspan(0, down * 4), servers));
  if (!std::is_sorted(dead.begin(), dead.end()) ||
      std::adjacent_find(dead.begin(), dead.end()) != dead.end()) {
    return ProtocolError("a rejoin journal's servers down are not in increasing order");
  }
  j.servers_down.insert(dead.begin(), dead.end());
  size_t at = down * 4;
  j.apply_without.assign(rest.begin() + at, rest.begin() + at + without);
  FERRY_RETURN_IF_ERROR(DecodeWorkerSet(j.apply_without, workers).status());
  at += without;
  FERRY_ASSIGN_OR_RETURN(std::vector<uint32_t> pairs,
                         DecodeWorkerSet(rest.subspan(at, repairs * 8), servers));
  at += repairs * 8;
  std::set<uint32_t> adopted;
  for (size_t i = 0; i < pairs.size(); i += 2) {
    if (pairs[i] == pairs[i + 1] || !adopted.insert(pairs[i + 1]).second) {
      return ProtocolError("a rejoin journal's repairs adopt spare " +
                           std::to_string(pairs[i + 1]) + " twice or a server into itself");
    }
    j.repairs.emplace_back(pairs[i], pairs[i + 1]);
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<uint32_t> in,
                         DecodeWorkerSet(rest.subspan(at, joined * 4), servers));
  for (uint32_t spare : in) {
    if (adopted.count(spare) == 0 || !j.joined.insert(spare).second) {
      return ProtocolError("a rejoin journal's spare " + std::to_string(spare) +
                           " joined without a repair, or twice");
    }
  }
  const uint32_t slots = j.role == Role::kServer ? servers : workers;
  const bool listed =
      std::any_of(j.membership.begin(), j.membership.end(), [&](const MemberInfo& i) {
        return i.role == j.role && i.index == j.index && i.rank == j.rank;
      });
  if (j.index >= slots || !listed) {
    return ProtocolError("a rejoin from " + std::string(RoleName(j.role)) + " " +
                         std::to_string(j.index) + " (rank " + std::to_string(j.rank) +
                         ") that its own membership does not list");
  }
  return j;
}

}  // namespace ferry::ps
