// Sequencing a rebalance on the coordinator (elastic jobs: ps/job/rebalance.h plans which shard
// copies move, ps/job/chain.h carries one move out): which moves begin now, which shards drain,
// which moves finish. Pure, so that it is tested alone (tests/ps/move_plan_test.cc); the
// coordinator sends each action on and every process applies it to its own ChainMap in the order
// the coordinator sent them, as with repairs.
//
// A move (shard q, from, to) goes through
//   begin    kBegin: ChainMap::BeginMove everywhere; q's live tail (the source, `server`) copies
//            q to the target while the pushes go on, and forwards the later ones behind the copy
//            (the repair path, server_repair.cc);
//   copied   Copied(q, to): the target holds every row and every push forwarded so far;
//   drain    kDrain: q's head (`server`) holds new pushes of q back (the workers send them again
//            after the finish, with the same push ids) until the tail acknowledged every push it
//            accepted: then every member holds the same rows, and the chain may be reordered;
//   drained  Drained(q): the head says so;
//   finish   kFinish: ChainMap::FinishMove everywhere (the target takes the source's place); the
//            workers send the held pushes to q's head.
// Only the drain stops anything, and only q's pushes, for about one trip down the chain.
// Limits: a server receives one copy at a time and sends one at a time (a copy streams whole rows
// through the target's move ring, and a source's copy competes with its serving); a shard has one
// move in progress at a time. A move waits while its source or its target is busy; a later one
// may begin first. A copy's source is the live tail when the move begins (`from` itself when it
// is the tail, and at R = 1).
//
// A move that no longer applies when its turn comes (a failure changed the chains: its source or
// target died, or its shard has no complete copy left) is skipped (kSkip), not waited for. A
// failure during a move (Failed): a dead target ends it (kSkip; its chain entry is a dead member
// like any other); a dead source restarts the copy from the new live tail (kBegin again: the
// target drops what it received); a dead head of a draining shard hands the drain to the new head
// (kDrain again).
//
// Thread-safety: a value type; not synchronised.
#pragma once

#include <cstdint>
#include <vector>

#include "ps/job/chain.h"
#include "ps/job/rebalance.h"
#include "transport/status.h"

namespace ferry::ps {

class MovePlan {
 public:
  enum class Step : uint8_t { kBegin, kDrain, kFinish, kSkip };
  struct Action {
    Step step = Step::kBegin;
    ShardMove move;
    // kBegin: the copy's source (the shard's live tail); kDrain: the shard's head; kFinish: the
    // head after the finish; kSkip: the move's `from`.
    uint32_t server = 0;
    bool operator==(const Action&) const = default;
  };

  // Moves as PlanJoin / PlanLeave make them (each shard once) for a job of `members` servers.
  MovePlan(std::vector<ShardMove> moves, uint32_t members);

  // The actions due now, each returned once, in the order to send them: the finishes of drained
  // moves, the drains of copied ones, then the begins that fit the limits (plan order) and the
  // skips. Carries the begins and finishes out on `chains`, the coordinator's own map (the one
  // failures and repairs change too).
  std::vector<Action> Next(ChainMap& chains);
  // Shard's target reports its copy complete. An error (nothing changes) unless a move of that
  // shard to `to` is copying.
  Status Copied(uint32_t shard, uint32_t to);
  // Shard's head reports the shard drained. An error unless a move of that shard is draining.
  Status Drained(uint32_t shard);
  // `server` died (already marked dead in `chains`): the actions that follow for the moves in
  // progress it took part in (see above).
  std::vector<Action> Failed(uint32_t server, const ChainMap& chains);

  bool done() const { return finished_ + skipped_ == moves_.size(); }
  size_t finished() const { return finished_; }
  size_t skipped() const { return skipped_; }
  size_t size() const { return moves_.size(); }

 private:
  enum class State : uint8_t {
    kPending,
    kCopying,
    kCopied,
    kDraining,
    kDrained,
    kFinished,
    kSkipped
  };
  int Find(uint32_t shard, State state) const;

  std::vector<ShardMove> moves_;
  std::vector<State> state_;
  std::vector<uint32_t> source_;               // per move: the copy's source once begun
  std::vector<uint32_t> drainer_;              // per move: the head told to drain
  std::vector<uint32_t> sending_, receiving_;  // per server: copies in progress
  size_t finished_ = 0, skipped_ = 0;
};

}  // namespace ferry::ps
