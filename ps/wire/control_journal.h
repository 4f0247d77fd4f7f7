// What one member said to the coordinator and heard from it: enough for a standby coordinator
// to rebuild the job's state after the coordinator's rank died, so that nothing has to be
// mirrored while the job runs. Every ControlClient keeps one (control.h); when its coordinator
// connection fails it connects to the standby and sends kRejoin (Rejoin() below), then the
// messages the standby may still need (replay: the newest gathers' parts, checkpoints not yet
// answered). Each message it had queued but not sent is either stood for by that state (Covers)
// or sent after it.
//
//   kRejoin {rank, role, index: the member; value = job fingerprint; members = the membership
//            it heard (kMembership); data = EncodeJournal: what it sent and heard, below}
//
// Pure and not thread-safe: ControlClient guards it with its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ps/wire/control.h"

namespace ferry::ps {

struct ControlJournal {
  // The member: its kRegister (rank, role, index).
  uint32_t rank = 0;
  Role role = Role::kServer;
  uint32_t index = 0;
  uint64_t fingerprint = 0;
  // Heard: kMembership (the members, and the standby coordinator's address in its text), kStart,
  // kShutdown, the newest kClockUpdate, the newest kApplyClock (its worker set too), kServerDown,
  // kChainRepair, kChainJoined.
  std::vector<MemberInfo> membership;
  std::string standby;
  bool started = false;
  bool shutdown = false;
  uint64_t min_clock = 0;
  uint64_t apply_clock = 0;
  std::vector<uint8_t> apply_without;  // EncodeWorkerSet
  std::set<uint32_t> servers_down;
  // kChainRepair (dead server, spare) in the order heard, and the spares heard joined
  // (kChainJoined): a member's chains are its ChainMap with these applied in that order.
  std::vector<std::pair<uint32_t, uint32_t>> repairs;
  std::set<uint32_t> joined;
  uint64_t barrier_released = 0;  // the newest kBarrierRelease (barrier ids count up per worker)
  // Sent: the newest kClock (clock, data position, kClockCheckpoint), the newest kBarrier, kFinish.
  uint64_t clock = 0;
  uint64_t position = 0;
  bool clock_checkpoint = false;
  uint64_t barrier_sent = 0;
  bool finished = false;
  // Sent and maybe lost with the coordinator: every part of the kReplayGathers newest gathers,
  // and each kCheckpoint until its kCheckpointDone came. Sent again after the kRejoin.
  std::deque<ControlMessage> replay;
  static constexpr uint64_t kReplayGathers = 4;

  void Sent(const ControlMessage& m);
  void Heard(const ControlMessage& m);
  // Whether the rejoin and its replay stand for an unsent message of this kind (it is dropped
  // from the queue instead of sent twice: a barrier entered twice would count twice).
  static bool Covers(ControlKind kind);
  ControlMessage Rejoin() const;
};

std::vector<uint8_t> EncodeJournal(const ControlJournal& j);
// The journal a kRejoin carries (rank, role, index, fingerprint, membership and data).
// kProtocol on a malformed message: a server index >= `servers` (JobSpec::server_members(),
// spares included), a worker set naming a worker >= `workers`, a repair whose spare adopted
// twice or a joined spare that adopted nothing, a member that is not in its own membership,
// truncated or trailing bytes.
Result<ControlJournal> DecodeRejoin(const ControlMessage& m, uint32_t servers, uint32_t workers);

}  // namespace ferry::ps
