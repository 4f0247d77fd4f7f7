// TicketTable and TicketState::Recycle (worker_state.h): a worker's tickets without an allocation
// per request. Open addressing with linear probing; ids are consecutive, so id & mask spreads
// them evenly, and deletion shifts the following entries back (no tombstones to clean up).
#include "ps/worker/worker_state.h"

namespace ferry::ps {

void TicketState::Recycle() {
  rows.reset();
  headers.reset();
  reroute_headers.clear();
  reads.clear();
  requests.clear();
  pos.clear();
  if (send != nullptr && send.use_count() == 1) {
    send->keys.reset();
    send->grads.reset();
    send->begin.clear();
    send->n = 0;
    send->fp16 = false;
  } else {
    send.reset();  // another ticket still reads it (PushGradients): not ours to reuse
  }
  id = 0;
  table = 0;
  type = RequestType::kPull;
  fp16_rows = false;
  read_only = false;
  clock = 0;
  headers_used = headers_cap = 0;
  row_bytes = row_prefix = 0;
  unreplied = unsent = 0;
  error = Status::Ok();
  released = grads_ready = grads_pushed = false;
}

TicketState* TicketTable::Create() {
  if (2 * (live_ + 1) > index_.size()) Grow();
  TicketState* s;
  if (!pool_.empty()) {
    s = pool_.back();
    pool_.pop_back();
  } else {
    states_.push_back(std::make_unique<TicketState>());
    s = states_.back().get();
    pool_.reserve(states_.size());  // so that retiring it never allocates
  }
  s->id = next_++;
  Insert(s);
  return s;
}

TicketState* TicketTable::Find(Ticket t) const {
  if (index_.empty() || t == 0) return nullptr;
  for (size_t i = SlotOf(t);; i = (i + 1) & (index_.size() - 1)) {
    if (index_[i].id == t) return index_[i].state;
    if (index_[i].id == 0) return nullptr;
  }
}

void TicketTable::Erase(Ticket t) {
  if (index_.empty() || t == 0) return;
  const size_t mask = index_.size() - 1;
  size_t i = SlotOf(t);
  while (index_[i].id != t) {
    if (index_[i].id == 0) return;
    i = (i + 1) & mask;
  }
  TicketState* s = index_[i].state;
  // Backward shift: move up every following entry whose home is not in (i, j].
  for (size_t j = (i + 1) & mask; index_[j].id != 0; j = (j + 1) & mask) {
    const size_t home = SlotOf(index_[j].id);
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    index_[i] = index_[j];
    i = j;
  }
  index_[i] = Entry{};
  --live_;
  s->Recycle();
  pool_.push_back(s);
}

void TicketTable::Clear() {
  for (Entry& e : index_) {
    if (e.id == 0) continue;
    e.state->Recycle();
    pool_.push_back(e.state);
    e = Entry{};
  }
  live_ = 0;
}

void TicketTable::Insert(TicketState* s) {
  size_t i = SlotOf(s->id);
  while (index_[i].id != 0) i = (i + 1) & (index_.size() - 1);
  index_[i] = Entry{s->id, s};
  ++live_;
}

void TicketTable::Grow() {
  std::vector<Entry> old(index_.empty() ? 64 : 2 * index_.size());
  old.swap(index_);
  live_ = 0;
  for (const Entry& e : old) {
    if (e.id != 0) Insert(e.state);
  }
}

}  // namespace ferry::ps
