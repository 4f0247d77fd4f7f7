// Rebalancing plans (see rebalance.h).
#include "ps/job/rebalance.h"

#include <algorithm>
#include <map>

namespace ferry::ps {
namespace {

struct Load {
  uint32_t copies = 0;
  uint32_t heads = 0;
};

std::map<uint32_t, Load> Loads(std::span<const std::vector<uint32_t>> chains,
                               std::span<const uint32_t> live) {
  std::map<uint32_t, Load> load;
  for (uint32_t s : live) load[s];
  for (const auto& chain : chains) {
    for (size_t k = 0; k < chain.size(); ++k) {
      Load& l = load[chain[k]];
      ++l.copies;
      if (k == 0) ++l.heads;
    }
  }
  return load;
}

bool Holds(const std::vector<uint32_t>& chain, uint32_t server) {
  return std::find(chain.begin(), chain.end(), server) != chain.end();
}

}  // namespace

std::vector<ShardMove> PlanJoin(std::span<const std::vector<uint32_t>> chains,
                                std::span<const uint32_t> live, uint32_t joining) {
  std::map<uint32_t, Load> load = Loads(chains, live);
  load.erase(joining);
  uint64_t copies = 0;
  for (const auto& chain : chains) copies += chain.size();
  const uint64_t servers = load.size() + 1;
  // Its share of the copies and of the heads (pulls go to heads), rounded down: the others keep
  // the remainder, so nothing moves that a later join would move back.
  const uint64_t target = copies / servers, head_target = chains.size() / servers;
  std::vector<bool> taken(chains.size(), false);
  std::vector<ShardMove> moves;
  uint64_t got_heads = 0;
  while (moves.size() < target) {
    const bool want_head = got_heads < head_target;
    // Donors from the most loaded (ties: the lowest index); from the first that has a shard the
    // joining server may take, a head copy while it wants heads, else a copy it does not head.
    std::vector<std::pair<uint32_t, uint32_t>> donors;  // (copies, server)
    for (const auto& [s, l] : load) donors.emplace_back(l.copies, s);
    std::stable_sort(donors.begin(), donors.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    int pick = -1;
    uint32_t donor = 0;
    for (const auto& [n, s] : donors) {
      int fallback = -1;
      for (uint32_t q = 0; q < chains.size() && pick < 0; ++q) {
        if (taken[q] || !Holds(chains[q], s)) continue;
        const bool head = chains[q].front() == s;
        if (head == want_head) {
          pick = static_cast<int>(q);
        } else if (fallback < 0) {
          fallback = static_cast<int>(q);
        }
      }
      if (pick < 0) pick = fallback;
      if (pick >= 0) {
        donor = s;
        break;
      }
    }
    if (pick < 0) break;  // every shard is on the joining server already
    const uint32_t q = static_cast<uint32_t>(pick);
    taken[q] = true;
    Load& l = load[donor];
    --l.copies;
    if (chains[q].front() == donor) {
      --l.heads;
      ++got_heads;
    }
    moves.push_back({q, donor, joining});
  }
  return moves;
}

std::optional<std::vector<ShardMove>> PlanLeave(std::span<const std::vector<uint32_t>> chains,
                                                std::span<const uint32_t> live, uint32_t leaving) {
  std::map<uint32_t, Load> load = Loads(chains, live);
  load.erase(leaving);
  std::vector<ShardMove> moves;
  // Head copies first, each to the server heading fewest (then holding fewest): heads are the
  // serving load; then the other copies, each to the server holding fewest.
  for (const bool heads : {true, false}) {
    for (uint32_t q = 0; q < chains.size(); ++q) {
      const auto at = std::find(chains[q].begin(), chains[q].end(), leaving);
      if (at == chains[q].end() || (at == chains[q].begin()) != heads) continue;
      auto better = [heads](const Load& a, const Load& b) {
        if (heads && a.heads != b.heads) return a.heads < b.heads;
        return a.copies < b.copies;
      };
      int to = -1;
      for (const auto& [s, l] : load) {
        if (Holds(chains[q], s)) continue;
        if (to < 0 || better(l, load[static_cast<uint32_t>(to)])) to = static_cast<int>(s);
      }
      if (to < 0) return std::nullopt;
      Load& l = load[static_cast<uint32_t>(to)];
      ++l.copies;
      if (heads) ++l.heads;
      moves.push_back({q, leaving, static_cast<uint32_t>(to)});
    }
  }
  return moves;
}

std::vector<std::vector<uint32_t>> ApplyMoves(std::span<const std::vector<uint32_t>> chains,
                                              std::span<const ShardMove> moves) {
  std::vector<std::vector<uint32_t>> out(chains.begin(), chains.end());
  for (const ShardMove& m : moves) {
    if (m.shard >= out.size()) continue;
    std::replace(out[m.shard].begin(), out[m.shard].end(), m.from, m.to);
  }
  return out;
}

}  // namespace ferry::ps
