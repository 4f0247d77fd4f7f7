// Chain geometry (see chain.h).
#include "ps/job/chain.h"

#include <algorithm>

namespace ferry::ps {

ChainMap::ChainMap(uint32_t servers, uint32_t replicas, uint32_t spares, uint32_t shards)
    : servers_(servers == 0 ? 1 : servers),
      shards_(shards < servers_ ? servers_ : shards),
      replicas_(replicas == 0 ? 1 : (replicas > servers_ ? servers_ : replicas)),
      spares_(spares),
      order_(shards_),
      hosted_(servers_ + spares),
      dead_(servers_ + spares, false),
      joining_(servers_ + spares, false),
      adopted_(servers_ + spares, false) {
  for (uint32_t q = 0; q < shards_; ++q) {
    for (uint32_t k = 0; k < replicas_; ++k) order_[q].push_back((q % servers_ + k) % servers_);
  }
  // Slots by distance, then by shard (chain.h): slot 0 is shard s, as with one shard a server.
  for (uint32_t s = 0; s < servers_; ++s) {
    for (uint32_t k = 0; k < replicas_; ++k) {
      for (uint32_t q = (s + servers_ - k) % servers_; q < shards_; q += servers_) {
        hosted_[s].push_back(q);
      }
    }
  }
}

int ChainMap::Slot(uint32_t server, uint32_t shard) const {
  if (server >= members() || shard >= shards_) return -1;
  const auto& h = hosted_[server];
  const auto it = std::find(h.begin(), h.end(), shard);
  return it == h.end() ? -1 : static_cast<int>(it - h.begin());
}

int ChainMap::Position(uint32_t shard, uint32_t server) const {
  if (shard >= shards_) return -1;
  const auto& o = order_[shard];
  const auto it = std::find(o.begin(), o.end(), server);
  return it == o.end() ? -1 : static_cast<int>(it - o.begin());
}

uint32_t ChainMap::live_servers() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < members(); ++i) n += !dead_[i] && !hosted_[i].empty() ? 1 : 0;
  return n;
}

int ChainMap::Head(uint32_t shard) const {
  if (shard >= shards_) return -1;
  for (uint32_t m : order_[shard]) {
    if (!dead_[m] && !Incomplete(shard, m)) return static_cast<int>(m);
  }
  return -1;
}

int ChainMap::Tail(uint32_t shard) const {
  if (shard >= shards_) return -1;
  const auto& o = order_[shard];
  for (auto it = o.rbegin(); it != o.rend(); ++it) {
    if (!dead_[*it] && !Incomplete(shard, *it)) return static_cast<int>(*it);
  }
  return -1;
}

int ChainMap::Successor(uint32_t shard, uint32_t server) const {
  const int at = Position(shard, server);
  if (at < 0) return -1;
  const auto& o = order_[shard];
  for (size_t k = static_cast<size_t>(at) + 1; k < o.size(); ++k) {
    if (!dead_[o[k]]) return static_cast<int>(o[k]);
  }
  return -1;
}

bool ChainMap::AllShardsLive(int also_dead) const {
  for (uint32_t q = 0; q < shards_; ++q) {
    const auto& o = order_[q];
    const bool live = std::any_of(o.begin(), o.end(), [&](uint32_t m) {
      return !dead_[m] && !Incomplete(q, m) && static_cast<int>(m) != also_dead;
    });
    if (!live) return false;
  }
  return true;
}

bool ChainMap::copying(uint32_t shard, uint32_t server) const {
  return std::find(copying_.begin(), copying_.end(), std::pair{shard, server}) != copying_.end();
}

bool ChainMap::BeginMove(uint32_t shard, uint32_t from, uint32_t to) {
  if (shard >= shards_ || from >= members() || to >= members() || dead_[to] || joining_[to] ||
      Position(shard, from) < 0 || Position(shard, to) >= 0 || Tail(shard) < 0) {
    return false;
  }
  order_[shard].push_back(to);
  // A slot a finished move left is taken again: a server never has more slots than shards.
  auto& slots = hosted_[to];
  const auto left = std::find(slots.begin(), slots.end(), kLeft);
  if (left != slots.end()) {
    *left = shard;
  } else {
    slots.push_back(shard);
  }
  copying_.emplace_back(shard, to);
  ++version_;
  return true;
}

bool ChainMap::FinishMove(uint32_t shard, uint32_t from, uint32_t to) {
  const auto it = std::find(copying_.begin(), copying_.end(), std::pair{shard, to});
  const int at = Position(shard, from);
  if (it == copying_.end() || at < 0 || from == to) return false;
  copying_.erase(it);
  // `to` was appended after `from`: erasing it leaves `from` at `at`.
  auto& o = order_[shard];
  o.erase(std::find(o.begin(), o.end(), to));
  o[static_cast<size_t>(at)] = to;
  std::replace(hosted_[from].begin(), hosted_[from].end(), shard, kLeft);
  ++version_;
  return true;
}

int ChainMap::IdleSpare() const {
  for (uint32_t i = servers_; i < members(); ++i) {
    if (!dead_[i] && hosted_[i].empty()) return static_cast<int>(i);
  }
  return -1;
}

bool ChainMap::Join(uint32_t dead, uint32_t spare) {
  if (dead >= members() || spare >= members() || !dead_[dead] || adopted_[dead] ||
      hosted_[dead].empty() || !is_spare(spare) || dead_[spare] || !hosted_[spare].empty()) {
    return false;
  }
  adopted_[dead] = true;
  hosted_[spare] = hosted_[dead];
  for (uint32_t shard : hosted_[spare]) order_[shard].push_back(spare);
  joining_[spare] = true;
  ++version_;
  return true;
}

bool ChainMap::Replay(std::span<const uint32_t> down,
                      std::span<const std::pair<uint32_t, uint32_t>> repairs,
                      std::span<const uint32_t> joined) {
  // A spare is marked dead only after the repairs it took part in: it joined while alive, and a
  // later repair that adopts its slots names it as the dead one (and marks it then).
  bool all = true;
  for (const auto& [dead, spare] : repairs) {
    if (dead >= members()) {
      all = false;
      continue;
    }
    MarkDead(dead);
    all = Join(dead, spare) && all;
  }
  for (uint32_t s : down) {
    if (s < members()) MarkDead(s);
  }
  for (uint32_t s : joined) {
    if (s < members() && joining_[s]) Joined(s);
  }
  return all;
}

}  // namespace ferry::ps
