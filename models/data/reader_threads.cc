// Threaded parsing for Reader (threads > 1); the flow is drawn in reader_internal.h.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "models/data/reader_internal.h"

namespace ferry::models::internal {
namespace {

// A blocking FIFO of at most `capacity` chunks. Close() wakes everyone: Push then refuses and
// Pop returns null, which is how a cancelled pipeline unwinds.
class ChunkQueue {
 public:
  explicit ChunkQueue(size_t capacity) : capacity_(capacity) {}

  bool Push(std::unique_ptr<ParsedChunk> chunk) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(chunk));
    not_empty_.notify_one();
    return true;
  }

  std::unique_ptr<ParsedChunk> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (closed_) return nullptr;
    std::unique_ptr<ParsedChunk> chunk = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return chunk;
  }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::deque<std::unique_ptr<ParsedChunk>> items_;
  bool closed_ = false;
};

constexpr size_t kQueueDepth = 2;

}  // namespace

std::string OverlongReason(size_t buffer_bytes) {
  return "line longer than the read buffer (" + std::to_string(buffer_bytes) +
         " bytes); raise buffer_bytes";
}

void ParseChunk(const ParseConfig& config, ParsedChunk* chunk) {
  if (chunk->overlong) {
    chunk->lines = 1;
    if (config.holdout.Filters() && !config.holdout.KeepsHash(chunk->overlong_hash)) {
      chunk->skipped = 1;
    } else {
      chunk->bad.push_back({0, 0, OverlongReason(config.buffer_bytes)});
    }
    return;
  }
  std::string_view text = chunk->text;
  Batch& batch = chunk->batch;
  while (!text.empty()) {
    size_t consumed;
    const std::string_view line = TakeLine(&text, &consumed);
    const uint64_t index = chunk->lines++;
    const LineFate fate = Triage(config, line);
    if (fate == LineFate::kBlank) continue;
    if (fate == LineFate::kOtherSide) {
      ++chunk->skipped;
      continue;
    }
    Status s =
        ParseLine(config.format, line, config.seed, config.hash_bits, &batch, config.field_map);
    if (!s.ok()) chunk->bad.push_back({index, batch.size(), s.message()});
  }
  chunk->text.clear();
}

struct ParsePipeline::State {
  State(LineSource* s, const ParseConfig& c, int threads)
      : source(s), config(c), chunk_bytes(std::max<size_t>(c.buffer_bytes / (4 * threads), 4096)) {
    for (int t = 0; t < threads; ++t) {
      in.push_back(std::make_unique<ChunkQueue>(kQueueDepth));
      out.push_back(std::make_unique<ChunkQueue>(kQueueDepth));
    }
  }

  // A cleared chunk, recycled when one is free.
  std::unique_ptr<ParsedChunk> Take() {
    {
      std::lock_guard<std::mutex> lock(free_mu);
      if (!free.empty()) {
        std::unique_ptr<ParsedChunk> c = std::move(free.back());
        free.pop_back();
        c->kind = ParsedChunk::Kind::kData;
        c->piece = 0;
        c->text.clear();
        c->overlong = false;
        c->overlong_hash = 0;
        c->bytes = c->lines = c->skipped = 0;
        c->batch.Clear();
        c->bad.clear();
        c->status = Status::Ok();
        return c;
      }
    }
    return std::make_unique<ParsedChunk>();
  }

  // Reading thread: cuts blocks into chunks of whole lines and deals them out round robin.
  void Produce() {
    uint64_t seq = 0;
    const auto send = [&](std::unique_ptr<ParsedChunk> c) {
      return in[seq++ % in.size()]->Push(std::move(c));
    };
    while (!cancelled.load(std::memory_order_relaxed)) {
      Result<LineSource::Block> block = source->Next();
      std::unique_ptr<ParsedChunk> chunk = Take();
      if (!block.ok()) {
        chunk->kind = ParsedChunk::Kind::kError;
        chunk->status = block.status();
        send(std::move(chunk));
        return;
      }
      chunk->piece = block->piece;
      if (block->kind == LineSource::Block::Kind::kEnd) {
        chunk->kind = ParsedChunk::Kind::kEnd;
        send(std::move(chunk));
        return;
      }
      if (block->kind == LineSource::Block::Kind::kOverlong) {
        chunk->overlong = true;
        chunk->overlong_hash = block->line_hash;
        chunk->bytes = block->bytes;
        if (!send(std::move(chunk))) return;
        continue;
      }
      std::string_view text = block->text;
      while (!text.empty()) {
        size_t take = text.size();
        if (take > chunk_bytes) {
          // End the chunk at the last '\n' within chunk_bytes, or after the first line if that
          // line alone is longer.
          const void* nl = memrchr(text.data(), '\n', chunk_bytes);
          if (!nl) nl = std::memchr(text.data() + chunk_bytes, '\n', text.size() - chunk_bytes);
          if (nl) take = static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1;
        }
        std::unique_ptr<ParsedChunk> part = chunk ? std::move(chunk) : Take();
        part->piece = block->piece;
        part->text.assign(text.data(), take);
        part->bytes = take;
        text.remove_prefix(take);
        if (!send(std::move(part))) return;
      }
    }
  }

  void Parse(size_t t) {
    while (true) {
      std::unique_ptr<ParsedChunk> chunk = in[t]->Pop();
      if (!chunk) return;  // cancelled
      const bool last = chunk->kind != ParsedChunk::Kind::kData;
      if (!last) ParseChunk(config, chunk.get());
      if (!out[t]->Push(std::move(chunk)) || last) return;
    }
  }

  void Cancel() {
    cancelled.store(true, std::memory_order_relaxed);
    for (auto& q : in) q->Close();
    for (auto& q : out) q->Close();
  }

  LineSource* const source;
  const ParseConfig config;
  const size_t chunk_bytes;
  std::vector<std::unique_ptr<ChunkQueue>> in;
  std::vector<std::unique_ptr<ChunkQueue>> out;
  std::atomic<bool> cancelled{false};
  uint64_t popped = 0;  // consumer side: chunks handed out so far
  // Chunks handed back by the consumer. At most the chunks in flight (about 5 per parser), so
  // the list stays as bounded as the queues.
  std::mutex free_mu;
  std::vector<std::unique_ptr<ParsedChunk>> free;
  std::vector<std::thread> threads;
};

Result<std::unique_ptr<ParsePipeline>> ParsePipeline::Start(LineSource* source,
                                                            const ParseConfig& config,
                                                            int threads) {
  std::unique_ptr<ParsePipeline> p(
      new ParsePipeline(std::make_unique<State>(source, config, threads)));
  State* s = p->state_.get();
  try {
    s->threads.emplace_back([s] { s->Produce(); });
    for (int t = 0; t < threads; ++t) s->threads.emplace_back([s, t] { s->Parse(t); });
  } catch (const std::system_error& e) {
    // ~ParsePipeline cancels and joins the threads that did start.
    return ResourceExhausted("cannot start reader threads: " + std::string(e.what()) +
                             "; lower threads");
  }
  return p;
}

void ParsePipeline::Recycle(std::unique_ptr<ParsedChunk> chunk) {
  std::lock_guard<std::mutex> lock(state_->free_mu);
  state_->free.push_back(std::move(chunk));
}

ParsePipeline::ParsePipeline(std::unique_ptr<State> state) : state_(std::move(state)) {}

ParsePipeline::~ParsePipeline() {
  state_->Cancel();
  for (std::thread& t : state_->threads) t.join();
}

std::unique_ptr<ParsedChunk> ParsePipeline::Pop() {
  State& s = *state_;
  std::unique_ptr<ParsedChunk> chunk = s.out[s.popped++ % s.out.size()]->Pop();
  if (!chunk) {
    chunk = std::make_unique<ParsedChunk>();
    chunk->kind = ParsedChunk::Kind::kError;
    chunk->status = Cancelled("reader pipeline was stopped");
  }
  return chunk;
}

}  // namespace ferry::models::internal
