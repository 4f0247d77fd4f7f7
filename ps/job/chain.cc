// Chain geometry (see chain.h).
#include "ps/job/chain.h"

#include <algorithm>
#include <cstring>

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

bool ChainMap::Revive(uint32_t server) {
  if (server >= members() || !dead_[server] || !hosted_[server].empty() || adopted_[server]) {
    return false;
  }
  dead_[server] = false;
  return true;
}

// Little-endian u32s: servers, shards, replicas, spares, version; each chain (length, members);
// each member's hosted slots (length, shards); each member's flags (dead, joining, adopted);
// the copying pairs (count, then shard and server of each).
std::vector<uint8_t> ChainMap::Encode() const {
  std::vector<uint32_t> w = {servers_, shards_, replicas_, spares_, version_};
  for (const auto& o : order_) {
    w.push_back(static_cast<uint32_t>(o.size()));
    w.insert(w.end(), o.begin(), o.end());
  }
  for (const auto& h : hosted_) {
    w.push_back(static_cast<uint32_t>(h.size()));
    w.insert(w.end(), h.begin(), h.end());
  }
  for (uint32_t i = 0; i < members(); ++i) {
    w.push_back((dead_[i] ? 1u : 0u) | (joining_[i] ? 2u : 0u) | (adopted_[i] ? 4u : 0u));
  }
  w.push_back(static_cast<uint32_t>(copying_.size()));
  for (const auto& [shard, server] : copying_) {
    w.push_back(shard);
    w.push_back(server);
  }
  std::vector<uint8_t> out(w.size() * 4);
  for (size_t i = 0; i < w.size(); ++i) {
    for (int b = 0; b < 4; ++b) out[i * 4 + b] = static_cast<uint8_t>(w[i] >> (8 * b));
  }
  return out;
}

bool ChainMap::Decode(std::span<const uint8_t> bytes) {
  if (bytes.size() % 4 != 0) return false;
  size_t at = 0;
  const size_t n = bytes.size() / 4;
  bool ok = true;
  auto next = [&]() -> uint32_t {
    if (at >= n) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= uint32_t{bytes[at * 4 + b]} << (8 * b);
    ++at;
    return v;
  };
  ChainMap m;
  m.servers_ = next();
  m.shards_ = next();
  m.replicas_ = next();
  m.spares_ = next();
  m.version_ = next();
  const uint64_t members = uint64_t{m.servers_} + m.spares_;
  if (!ok || m.servers_ == 0 || m.shards_ < m.servers_ || m.shards_ > 65535 || m.replicas_ == 0 ||
      m.replicas_ > m.servers_ || members > 65535 + 64) {
    return false;
  }
  // A list of at most `limit` entries, each below `below` (or kLeft when `left`).
  auto list = [&](uint32_t limit, uint64_t below, bool left, std::vector<uint32_t>* out) {
    const uint32_t len = next();
    if (!ok || len > limit || len > n - at) return false;
    out->resize(len);
    for (uint32_t& v : *out) {
      v = next();
      if (!(v < below || (left && v == kLeft))) return false;
    }
    return ok;
  };
  m.order_.assign(m.shards_, {});
  for (auto& o : m.order_) {
    if (!list(static_cast<uint32_t>(members), members, false, &o)) return false;
  }
  m.hosted_.assign(members, {});
  for (auto& h : m.hosted_) {
    if (!list(m.shards_, m.shards_, true, &h)) return false;
  }
  m.dead_.assign(members, false);
  m.joining_.assign(members, false);
  m.adopted_.assign(members, false);
  for (uint32_t i = 0; i < members; ++i) {
    const uint32_t f = next();
    if (!ok || f > 7) return false;
    m.dead_[i] = (f & 1) != 0;
    m.joining_[i] = (f & 2) != 0;
    m.adopted_[i] = (f & 4) != 0;
  }
  const uint32_t copies = next();
  if (!ok || copies > m.shards_ || copies > (n - at) / 2) return false;
  for (uint32_t c = 0; c < copies; ++c) {
    const uint32_t shard = next(), server = next();
    if (!ok || shard >= m.shards_ || server >= members) return false;
    m.copying_.emplace_back(shard, server);
  }
  if (at != n) return false;
  *this = std::move(m);
  return true;
}

}  // namespace ferry::ps
