// Chain geometry (see chain.h).
#include "ps/job/chain.h"

namespace ferry::ps {

ChainMap::ChainMap(uint32_t servers, uint32_t replicas)
    : servers_(servers == 0 ? 1 : servers),
      replicas_(replicas == 0 ? 1 : (replicas > servers_ ? servers_ : replicas)),
      dead_(servers_, false) {}

int ChainMap::Position(uint32_t shard, uint32_t server) const {
  const uint32_t k = (server + servers_ - shard % servers_) % servers_;
  return k < replicas_ ? static_cast<int>(k) : -1;
}

uint32_t ChainMap::live_servers() const {
  uint32_t n = 0;
  for (bool d : dead_) n += d ? 0 : 1;
  return n;
}

int ChainMap::Head(uint32_t shard) const {
  for (uint32_t k = 0; k < replicas_; ++k) {
    const uint32_t m = Member(shard, k);
    if (!dead_[m]) return static_cast<int>(m);
  }
  return -1;
}

int ChainMap::Successor(uint32_t shard, uint32_t server) const {
  const int at = Position(shard, server);
  if (at < 0) return -1;
  for (uint32_t k = static_cast<uint32_t>(at) + 1; k < replicas_; ++k) {
    const uint32_t m = Member(shard, k);
    if (!dead_[m]) return static_cast<int>(m);
  }
  return -1;
}

bool ChainMap::AllShardsLive(int also_dead) const {
  for (uint32_t s = 0; s < servers_; ++s) {
    bool live = false;
    for (uint32_t k = 0; k < replicas_ && !live; ++k) {
      const uint32_t m = Member(s, k);
      live = !dead_[m] && static_cast<int>(m) != also_dead;
    }
    if (!live) return false;
  }
  return true;
}

}  // namespace ferry::ps
