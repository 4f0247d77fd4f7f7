// Sequencing a rebalance (see move_plan.h).
#include "ps/coordinator/move_plan.h"

#include <string>
#include <utility>

namespace ferry::ps {

MovePlan::MovePlan(std::vector<ShardMove> moves, uint32_t members)
    : moves_(std::move(moves)),
      state_(moves_.size(), State::kPending),
      source_(moves_.size(), 0),
      drainer_(moves_.size(), 0),
      sending_(members, 0),
      receiving_(members, 0) {}

int MovePlan::Find(uint32_t shard, State state) const {
  for (size_t i = 0; i < moves_.size(); ++i) {
    if (moves_[i].shard == shard && state_[i] == state) return static_cast<int>(i);
  }
  return -1;
}

std::vector<MovePlan::Action> MovePlan::Next(ChainMap& chains) {
  std::vector<Action> out;
  // Finishes first: each frees its shard for the shard's next move.
  for (size_t i = 0; i < moves_.size(); ++i) {
    if (state_[i] != State::kDrained) continue;
    const ShardMove& m = moves_[i];
    if (!chains.FinishMove(m.shard, m.from, m.to)) {  // a failure took a member meanwhile
      state_[i] = State::kSkipped;
      ++skipped_;
      out.push_back({Step::kSkip, m, m.from});
      continue;
    }
    state_[i] = State::kFinished;
    ++finished_;
    const int head = chains.Head(m.shard);
    out.push_back({Step::kFinish, m, head < 0 ? m.to : static_cast<uint32_t>(head)});
  }
  for (size_t i = 0; i < moves_.size(); ++i) {
    if (state_[i] != State::kCopied) continue;
    const int head = chains.Head(moves_[i].shard);
    state_[i] = State::kDraining;
    drainer_[i] = head < 0 ? moves_[i].from : static_cast<uint32_t>(head);
    out.push_back({Step::kDrain, moves_[i], drainer_[i]});
  }
  std::vector<bool> shard_busy(chains.shards(), false);
  for (size_t i = 0; i < moves_.size(); ++i) {
    const State s = state_[i];
    if (s != State::kPending && s != State::kFinished && s != State::kSkipped &&
        moves_[i].shard < shard_busy.size()) {
      shard_busy[moves_[i].shard] = true;
    }
  }
  for (size_t i = 0; i < moves_.size(); ++i) {
    if (state_[i] != State::kPending) continue;
    const ShardMove& m = moves_[i];
    const bool valid = m.shard < chains.shards() && m.to < sending_.size() &&
                       m.to < chains.members() && m.from < chains.members();
    const int tail = valid ? chains.Tail(m.shard) : -1;
    if (valid && tail >= 0 && !chains.dead(m.from) && !chains.dead(m.to) &&
        chains.Position(m.shard, m.from) >= 0 && chains.Position(m.shard, m.to) < 0) {
      const uint32_t source = static_cast<uint32_t>(tail);
      if (shard_busy[m.shard] || sending_[source] > 0 || receiving_[m.to] > 0) continue;  // waits
      if (chains.BeginMove(m.shard, m.from, m.to)) {
        state_[i] = State::kCopying;
        source_[i] = source;
        ++sending_[source];
        ++receiving_[m.to];
        shard_busy[m.shard] = true;
        out.push_back({Step::kBegin, m, source});
        continue;
      }
    }
    state_[i] = State::kSkipped;
    ++skipped_;
    out.push_back({Step::kSkip, m, m.from});
  }
  return out;
}

Status MovePlan::Copied(uint32_t shard, uint32_t to) {
  const int i = Find(shard, State::kCopying);
  if (i < 0 || moves_[static_cast<size_t>(i)].to != to) {
    return ProtocolError("server " + std::to_string(to) + " reports a copy of shard " +
                         std::to_string(shard) + " that no move is making");
  }
  const size_t k = static_cast<size_t>(i);
  state_[k] = State::kCopied;
  --sending_[source_[k]];
  --receiving_[to];
  return Status::Ok();
}

std::vector<MovePlan::Action> MovePlan::Failed(uint32_t server, const ChainMap& chains) {
  std::vector<Action> out;
  for (size_t i = 0; i < moves_.size(); ++i) {
    const ShardMove& m = moves_[i];
    if (state_[i] == State::kCopying && (m.to == server || source_[i] == server)) {
      --sending_[source_[i]];
      --receiving_[m.to];
      const int tail = chains.Tail(m.shard);
      if (m.to == server || tail < 0) {
        state_[i] = State::kSkipped;
        ++skipped_;
        out.push_back({Step::kSkip, m, m.from});
        continue;
      }
      // The copy starts again from the new live tail, even if that source is copying another
      // shard (two at once for a while: restarting is rarer than waiting would be costly; no
      // other copy begins from it until both are done).
      source_[i] = static_cast<uint32_t>(tail);
      ++sending_[source_[i]];
      ++receiving_[m.to];
      out.push_back({Step::kBegin, m, source_[i]});
    } else if (state_[i] == State::kDraining && drainer_[i] == server) {
      const int head = chains.Head(m.shard);
      if (head < 0) {
        state_[i] = State::kSkipped;
        ++skipped_;
        out.push_back({Step::kSkip, m, m.from});
        continue;
      }
      drainer_[i] = static_cast<uint32_t>(head);
      out.push_back({Step::kDrain, m, drainer_[i]});
    }
  }
  return out;
}

Status MovePlan::Drained(uint32_t shard) {
  const int i = Find(shard, State::kDraining);
  if (i < 0) {
    return ProtocolError("shard " + std::to_string(shard) + " reported drained, not draining");
  }
  state_[static_cast<size_t>(i)] = State::kDrained;
  return Status::Ok();
}

}  // namespace ferry::ps
