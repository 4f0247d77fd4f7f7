// The worker's allocation-free bookkeeping, alone (ps/worker/worker_state.h, ticket_table.cc,
// ps/store/range_allocator.h): the ticket table against a std::map under random creates and
// erases, scratch leases nested as the request path nests them, and the range allocator's node
// reuse against a byte map.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "ps/store/range_allocator.h"
#include "ps/worker/worker_state.h"

namespace ferry::ps {
namespace {

TEST(TicketTable, MatchesAMapUnderRandomCreatesAndErases) {
  TicketTable table;
  std::map<Ticket, TicketState*> model;
  std::mt19937_64 rng(11);
  Ticket last = 0;
  for (int step = 0; step < 20000; ++step) {
    // Mostly FIFO-ish retirement, as replies come back, with some long-lived tickets.
    if (model.size() < 300 && (model.empty() || rng() % 3 != 0)) {
      TicketState* s = table.Create();
      ASSERT_GT(s->id, last);  // ids grow and are never reused
      last = s->id;
      EXPECT_EQ(s->unreplied, 0u);
      EXPECT_FALSE(s->rows);
      EXPECT_TRUE(s->pos.empty());
      s->unreplied = 7;  // dirtied: a recycled state must come back reset
      s->pos.assign(5, 1);
      model[s->id] = s;
    } else {
      auto it = model.begin();
      std::advance(it, rng() % 4 == 0 ? rng() % model.size() : 0);
      table.Erase(it->first);
      EXPECT_EQ(table.Find(it->first), nullptr);
      model.erase(it);
    }
    ASSERT_EQ(table.size(), model.size());
    if (step % 97 == 0) {
      for (const auto& [id, state] : model) ASSERT_EQ(table.Find(id), state) << id;
      EXPECT_EQ(table.Find(last + 1), nullptr);
      EXPECT_EQ(table.Find(0), nullptr);
    }
  }
  table.Erase(last + 5);  // unknown: a no-op
  table.Clear();
  EXPECT_EQ(table.size(), 0u);
  for (const auto& [id, state] : model) EXPECT_EQ(table.Find(id), nullptr);
}

TEST(TicketTable, RecycledStateKeepsItsSendDataUnlessShared) {
  RangeAllocator alloc(0, 1 << 16);
  TicketTable table;
  TicketState* a = table.Create();
  a->send = std::make_shared<SendData>();
  a->send->keys = Block(&alloc, *alloc.Allocate(64), 64);
  a->rows = Block(&alloc, *alloc.Allocate(128), 128);
  const SendData* kept = a->send.get();
  const Ticket first = a->id;
  table.Erase(first);
  EXPECT_EQ(alloc.used(), 0u);  // its ranges came back at once, not at reuse
  TicketState* b = table.Create();
  ASSERT_NE(b->id, first);
  EXPECT_EQ(b->send.get(), kept);  // reused, emptied
  EXPECT_FALSE(b->send->keys);
  // Shared (a push reading a pull's keys): the other holder keeps it, the state lets go.
  std::shared_ptr<SendData> other = b->send;
  table.Erase(b->id);
  EXPECT_EQ(table.Create()->send, nullptr);
  EXPECT_EQ(other.use_count(), 1);
}

TEST(ScratchStack, NestedLeasesGetTheirOwnVectorsAndKeepCapacity) {
  ScratchStack<int> stack;
  const int* outer_data = nullptr;
  {
    ScratchStack<int>::Lease outer(stack);
    outer->assign(100, 1);
    outer_data = outer->data();
    {
      ScratchStack<int>::Lease inner(stack);  // a nested call: not the caller's vector
      EXPECT_TRUE(inner->empty());
      inner->assign(50, 2);
      for (int depth = 0; depth < 20; ++depth) {  // deeper: the outer two stay where they are
        ScratchStack<int>::Lease deeper(stack);
        deeper->push_back(depth);
      }
    }
    EXPECT_EQ(outer->size(), 100u);
    EXPECT_EQ(outer->data(), outer_data);
    EXPECT_EQ((*outer)[99], 1);
  }
  ScratchStack<int>::Lease again(stack);
  EXPECT_TRUE(again->empty());
  EXPECT_GE(again->capacity(), 100u);  // the same vector, its capacity kept
}

TEST(RangeAllocator, ReusesNodesAndCoalescesUnderRandomUse) {
  constexpr uint64_t kBytes = 1 << 20;
  RangeAllocator alloc(0, kBytes, 64);
  std::vector<std::pair<uint64_t, uint64_t>> held;  // offset, bytes
  std::vector<uint8_t> owner(kBytes / 64, 0);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 20000; ++step) {
    if (held.empty() || rng() % 2 == 0) {
      const uint64_t bytes = 1 + rng() % 4000;
      auto at = alloc.Allocate(bytes);
      if (!at) continue;
      ASSERT_EQ(*at % 64, 0u);
      const uint64_t blocks = (bytes + 63) / 64;
      for (uint64_t b = *at / 64; b < *at / 64 + blocks; ++b) {
        ASSERT_EQ(owner[b], 0) << "range handed out twice at " << b * 64;
        owner[b] = 1;
      }
      held.emplace_back(*at, bytes);
    } else {
      const size_t i = rng() % held.size();
      const auto [offset, bytes] = held[i];
      for (uint64_t b = offset / 64; b < offset / 64 + (bytes + 63) / 64; ++b) owner[b] = 0;
      alloc.Free(offset, bytes);
      held[i] = held.back();
      held.pop_back();
    }
  }
  for (const auto& [offset, bytes] : held) alloc.Free(offset, bytes);
  EXPECT_EQ(alloc.used(), 0u);
  // Everything coalesced back into one range: the whole buffer fits again.
  auto all = alloc.Allocate(kBytes);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(*all, 0u);
}

}  // namespace
}  // namespace ferry::ps
