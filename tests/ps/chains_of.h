// Test helper: a ChainMap's chains as plain vectors ([shard] -> members, head first, dead and
// copying members included), the form ps/job/rebalance.h's planners take.
#pragma once

#include <cstdint>
#include <vector>

#include "ps/job/chain.h"

namespace ferry::ps {

inline std::vector<std::vector<uint32_t>> ChainsOf(const ChainMap& map) {
  std::vector<std::vector<uint32_t>> out;
  for (uint32_t q = 0; q < map.shards(); ++q) {
    out.emplace_back(map.Chain(q).begin(), map.Chain(q).end());
  }
  return out;
}

}  // namespace ferry::ps
