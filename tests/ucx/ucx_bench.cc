// Informal measurements of the ucx backend between two processes (not a test): ping-pong
// latency (8-byte Send/Recv), Write bandwidth (1 MiB, 8 in flight) and sparse 64-byte rows
// (into plain and into shareable memory) versus a local memcpy gather.
// Usage: ucx_bench <UCX_TLS> (re-executes itself as the server).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "transport/pool.h"
#include "transport/transport.h"

using namespace ferry;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kRegion = 64u << 20;

double Secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int Server(const std::string& tls) {
  TransportOptions o;
  o.params = {{"UCX_TLS", tls}};
  auto t = CreateTransport("ucx", o);
  if (!t.ok()) {
    std::printf("ERR %s\n", t.status().ToString().c_str());
    return 1;
  }
  std::vector<uint8_t> mem(kRegion);
  auto mr = (*t)->RegisterMemory(mem.data(), mem.size(), kAccessRemote);
  // A second region of shareable memory (a memfd): same-host peers copy into it directly.
  auto shm = ShareableMemory::Allocate(kRegion);
  if (!shm.ok()) return 1;
  std::memset(shm->data(), 0, shm->size());
  auto smr = (*t)->RegisterMemory(shm->data(), shm->size(), kAccessRemote);
  if (!mr.ok() || !smr.ok()) return 1;
  (*t)->Advertise({(*mr)->descriptor(), (*smr)->descriptor()});
  auto addr = (*t)->Listen("127.0.0.1:0");
  std::printf("ADDR %s\n", addr->c_str());
  std::fflush(stdout);
  auto ep = (*t)->Accept(Millis(30000));
  if (!ep.ok()) return 1;
  std::vector<uint8_t> buf(4096);
  auto bmr = (*t)->RegisterMemory(buf.data(), buf.size(), kAccessLocal);
  Op r;
  r.type = OpType::kRecv;
  r.ep = ep->get();
  r.local = bmr->get();
  r.length = 4096;
  (void)(*t)->Post({&r, 1});
  Completion c[16];
  while (true) {
    size_t n = (*t)->Poll(c);
    for (size_t i = 0; i < n; ++i) {
      if (!c[i].ok()) return 0;
      if (c[i].type != OpType::kRecv) continue;
      if (c[i].bytes == 1 && buf[0] == 'Q') return 0;
      Op s = r;
      s.type = OpType::kSend;
      s.length = c[i].bytes;
      Op ops[] = {r, s};  // re-post the Recv first, then echo
      (void)(*t)->Post(ops);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--server") return Server(argv[2]);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string tls = argc > 1 ? argv[1] : "shm,self";
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    char self[] = "/proc/self/exe";
    char flag[] = "--server";
    std::string arg = tls;
    char* av[] = {self, flag, arg.data(), nullptr};
    execv(self, av);
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  while (true) {
    line.clear();
    char ch;
    bool got = false;
    while (read(fds[0], &ch, 1) == 1) {
      got = true;
      if (ch == '\n') break;
      line += ch;
    }
    if (!got || line.rfind("ADDR ", 0) == 0) break;
  }
  if (line.rfind("ADDR ", 0) != 0) {
    std::printf("server failed: %s\n", line.c_str());
    return 1;
  }
  TransportOptions o;
  o.params = {{"UCX_TLS", tls}};
  auto t = CreateTransport("ucx", o);
  auto ep = (*t)->Connect(line.substr(5), Millis(20000));
  if (!ep.ok()) {
    std::printf("connect: %s\n", ep.status().ToString().c_str());
    return 1;
  }
  auto key = (*ep)->Import((*ep)->peer_regions()[0]);
  std::vector<uint8_t> mem(kRegion, 1);
  auto mr = (*t)->RegisterMemory(mem.data(), mem.size(), kAccessLocal);
  Completion c[64];

  // Latency: 8-byte ping-pong.
  {
    Op r;
    r.type = OpType::kRecv;
    r.ep = ep->get();
    r.local = mr->get();
    r.local_offset = 4096;
    r.length = 4096;
    Op s = r;
    s.type = OpType::kSend;
    s.local_offset = 0;
    s.length = 8;
    const int warm = 2000, iters = 50000;
    std::vector<double> rtt;
    rtt.reserve(iters);
    for (int i = 0; i < warm + iters; ++i) {
      auto t0 = Clock::now();
      Op ops[] = {r, s};
      (void)(*t)->Post(ops);
      int got = 0;
      while (got < 2) got += static_cast<int>((*t)->Poll(c));
      if (i >= warm) rtt.push_back(Secs(t0, Clock::now()));
    }
    double sum = 0;
    for (double x : rtt) sum += x;
    std::sort(rtt.begin(), rtt.end());
    std::printf(
        "[%s] send/recv 8 B half round trip: typical (median) %.3f us, min %.3f us, "
        "avg %.3f us\n",
        tls.c_str(), rtt[rtt.size() / 2] / 2 * 1e6, rtt[0] / 2 * 1e6, sum / rtt.size() / 2 * 1e6);
  }
  // Bandwidth: Write 1 MiB, 8 in flight.
  for (size_t size : {size_t{65536}, size_t{1} << 20}) {
    Op w;
    w.type = OpType::kWrite;
    w.ep = ep->get();
    w.local = mr->get();
    w.length = size;
    w.remote = key->get();
    const int total = static_cast<int>((size_t{1} << 30) / size);
    int posted = 0, done = 0;
    auto t0 = Clock::now();
    while (done < total) {
      while (posted < total && posted - done < 8) {
        w.remote_offset = (posted % 32) * size;
        (void)(*t)->Post({&w, 1});
        ++posted;
      }
      size_t n = (*t)->Poll(c);
      for (size_t i = 0; i < n; ++i) {
        if (!c[i].ok()) std::printf("write error: %s\n", c[i].error.c_str());
      }
      done += static_cast<int>(n);
    }
    std::printf("[%s] write %zu B x %d: %.0f MB/s\n", tls.c_str(), size, total,
                size * double(total) / Secs(t0, Clock::now()) / 1e6);
  }
  // Sparse 64-byte rows: 10,000 random rows of a 64 MiB table, into plain memory (CMA), into
  // shareable memory (memfd mapping) and a local memcpy gather of the same rows, alternating
  // (this machine is noisy: the median of the per-round ratios is what to look at).
  {
    constexpr size_t kRows = 10000, kRow = 64, kTable = kRegion / kRow;
    auto skey = (*ep)->Import((*ep)->peer_regions().at(1));
    if (!skey.ok()) return 1;
    std::mt19937_64 rng(1);
    std::vector<Segment> segs(kRows);
    for (size_t i = 0; i < kRows; ++i) segs[i] = {i * kRow, (rng() % kTable) * kRow, kRow};
    std::vector<uint8_t> table(kRegion, 1);
    std::vector<uint8_t> dst(kRows * kRow);
    auto sparse = [&](const RemoteKey* k, int reps) {
      Op w;
      w.type = OpType::kSparseWrite;
      w.ep = ep->get();
      w.local = mr->get();
      w.remote = k;
      w.segments = segs.data();
      w.num_segments = kRows;
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) {
        (void)(*t)->Post({&w, 1});
        while ((*t)->Poll(c) == 0) {
        }
        if (!c[0].ok()) std::printf("sparse error: %s\n", c[0].error.c_str());
      }
      return kRows * double(reps) / Secs(t0, Clock::now());
    };
    auto gather = [&](int reps) {
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) {
        for (size_t j = 0; j < kRows; ++j) {
          std::memcpy(dst.data() + segs[j].local_offset, table.data() + segs[j].remote_offset,
                      kRow);
        }
      }
      return kRows * double(reps) / Secs(t0, Clock::now());
    };
    std::vector<double> cma_ratio, shm_ratio;
    for (int round = 0; round < 15; ++round) {
      const double g = gather(20);
      const double a = sparse(key->get(), 20);
      const double b = sparse(skey->get(), 20);
      const double g2 = gather(20);
      cma_ratio.push_back(a / ((g + g2) / 2));
      shm_ratio.push_back(b / ((g + g2) / 2));
      std::printf("[%s] round %d rows/s: gather %.2fM, cma %.2fM, memfd %.2fM\n", tls.c_str(),
                  round, (g + g2) / 2e6, a / 1e6, b / 1e6);
    }
    std::sort(cma_ratio.begin(), cma_ratio.end());
    std::sort(shm_ratio.begin(), shm_ratio.end());
    std::printf(
        "[%s] sparse write 10k x 64 B rows vs memcpy gather, median ratio: cma %.2f, "
        "memfd %.2f\n",
        tls.c_str(), cma_ratio[7], shm_ratio[7]);
  }
  // Stop the server.
  mem[0] = 'Q';
  Op q;
  q.type = OpType::kSend;
  q.ep = ep->get();
  q.local = mr->get();
  q.length = 1;
  (void)(*t)->Post({&q, 1});
  for (int i = 0; i < 1000; ++i) (*t)->Poll(c);
  int st = 0;
  waitpid(pid, &st, 0);
  return 0;
}
