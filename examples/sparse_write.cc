// sparse_write: the smallest complete use of Ferry's transport, built against the INSTALLED
// library (see examples/Makefile):
//
//   c++ -std=c++20 sparse_write.cc $(pkg-config --cflags --libs ferry) -o sparse_write
//   ./sparse_write [tcp|ucx|verbs] [rows] [row-bytes]
//
// One process plays both peers so it runs anywhere: a "server" transport registers a table of
// rows and advertises it in its handshake; a "client" transport connects over 127.0.0.1, imports
// the advertised region and writes a scattered set of its own rows into scattered rows of the
// server's table with ONE sparse write carrying a notification. The server learns that the rows
// have landed from the notification alone (no extra message), then the program checks every byte.
// Exit status 0 when every row arrived intact; 1 with a message otherwise.
#include <transport/transport.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t kImm = 0x5eed;

int Fail(const std::string& what, const ferry::Status& s) {
  std::fprintf(stderr, "sparse_write: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string backend = argc > 1 ? argv[1] : "tcp";
  const size_t rows = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1000;
  const size_t row_bytes = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 64;
  if (rows == 0 || row_bytes == 0) {
    std::fprintf(stderr, "usage: sparse_write [tcp|ucx|verbs] [rows>0] [row-bytes>0]\n");
    return 2;
  }

  // The server: a table of 4x as many rows as are written, registered for remote writes and
  // advertised to every peer in the handshake.
  std::vector<uint8_t> table(4 * rows * row_bytes, 0);
  ferry::TransportOptions server_options;
  auto server = ferry::CreateTransport(backend, server_options);
  if (!server.ok()) return Fail("create " + backend, server.status());
  auto table_mr = (*server)->RegisterMemory(table.data(), table.size(), ferry::kAccessRemoteWrite);
  if (!table_mr.ok()) return Fail("register the table", table_mr.status());
  (*server)->Advertise({(*table_mr)->descriptor()});
  auto address = (*server)->Listen("127.0.0.1:0");
  if (!address.ok()) return Fail("listen", address.status());

  // The client: the rows it sends, in one registered buffer.
  std::vector<uint8_t> source(rows * row_bytes);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 7 + 1);
  auto client = ferry::CreateTransport(backend, ferry::TransportOptions{});
  if (!client.ok()) return Fail("create " + backend, client.status());
  auto source_mr = (*client)->RegisterMemory(source.data(), source.size(), ferry::kAccessLocal);
  if (!source_mr.ok()) return Fail("register the source", source_mr.status());

  // Connect blocks until the handshake is answered, and the server answers it inside Accept, so
  // the server accepts on a second thread while this one connects.
  ferry::Result<std::shared_ptr<ferry::Endpoint>> accepted = ferry::Internal("not accepted");
  std::thread acceptor([&] { accepted = (*server)->Accept(ferry::Millis(10000)); });
  auto ep = (*client)->Connect(*address, ferry::Millis(10000));
  acceptor.join();
  if (!ep.ok()) return Fail("connect to " + *address, ep.status());
  if (!accepted.ok()) return Fail("accept", accepted.status());
  if ((*ep)->peer_regions().empty()) {
    return Fail("handshake", ferry::ProtocolError("the server advertised no region"));
  }
  auto key = (*ep)->Import((*ep)->peer_regions()[0]);
  if (!key.ok()) return Fail("import the table", key.status());

  // Row i of the source goes to row (i * 3 + 1) % (4 * rows) of the table: scattered, no packing.
  std::vector<ferry::Segment> segments(rows);
  for (size_t i = 0; i < rows; ++i) {
    segments[i] = {i * row_bytes, ((i * 3 + 1) % (4 * rows)) * row_bytes, row_bytes};
  }
  ferry::Op op;
  op.type = ferry::OpType::kSparseWrite;
  op.flags = ferry::kOpNotify;
  op.imm = kImm;
  op.ep = ep->get();
  op.local = source_mr->get();
  op.remote = key->get();
  op.segments = segments.data();
  op.num_segments = segments.size();
  op.context = 1;
  if (ferry::Status s = (*client)->Post({&op, 1}); !s.ok()) return Fail("post", s);

  // The client's completion says the bytes are in the server's memory; the server's kNotify
  // completion says the same on its side. Both transports need progress: poll them in turn.
  bool written = false, notified = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(written && notified) && std::chrono::steady_clock::now() < deadline) {
    ferry::Completion c;
    if (!written && (*client)->Poll({&c, 1}) == 1) {
      if (!c.ok()) return Fail("sparse write", ferry::Status(c.code, c.error));
      written = true;
    }
    if (!notified && (*server)->Poll({&c, 1}) == 1) {
      if (!c.ok() || c.type != ferry::OpType::kNotify || c.imm != kImm) {
        return Fail("notification", ferry::Status(c.code, "unexpected completion " + c.error));
      }
      notified = true;
    }
    if (!(written && notified)) (void)(*server)->Wait(ferry::Millis(1));
  }
  if (!written || !notified) {
    return Fail("sparse write", ferry::Timeout("no completion within 10 s"));
  }

  for (size_t i = 0; i < rows; ++i) {
    const uint8_t* got = table.data() + segments[i].remote_offset;
    if (std::memcmp(got, source.data() + i * row_bytes, row_bytes) != 0) {
      std::fprintf(stderr, "sparse_write: row %zu arrived corrupted\n", i);
      return 1;
    }
  }
  std::printf(
      "sparse_write: %s: %zu rows of %zu B written into scattered rows, notified, verified\n",
      backend.c_str(), rows, row_bytes);
  return 0;
}
