// Protection: out-of-bounds, missing rights, deregistered and forged descriptors.
//
// With genuine descriptors the initiator already knows the op is bad: ValidateOp makes Post()
// fail, naming the op, and nothing is posted. A deregistered region or a forged descriptor
// (length, access or rkey edited, then imported) can only be caught by the target; that is
// promised only where Capabilities::target_checks is true (a deregistered key also where
// final_deregistration is), and then the op must complete with an error on the initiator
// without a single byte changing on the target (or, for a read, in the initiator's destination).
#include <cstring>
#include <functional>
#include <random>

#include "tests/conformance/harness.h"

namespace ferry::testing {
namespace {

TEST_P(Conformance, GenuineDescriptorViolationsFailAtPost) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(MakePair(&p));
  const Capabilities& caps = p.a->capabilities();
  FERRY_REQUIRE_CAP(caps, write);
  FERRY_REQUIRE_CAP(caps, read);
  Buffer extra(2 * 65536);
  std::unique_ptr<MemoryRegion> ro, wo;
  ASSERT_OK_AND_ASSIGN(ro, p.b->RegisterMemory(extra.data(), 65536, kAccessRemoteRead));
  ASSERT_OK_AND_ASSIGN(wo, p.b->RegisterMemory(extra.data() + 65536, 65536, kAccessRemoteWrite));
  std::unique_ptr<RemoteKey> ro_key, wo_key;
  ASSERT_OK_AND_ASSIGN(ro_key, p.a_ep()->Import(ro->descriptor()));
  ASSERT_OK_AND_ASSIGN(wo_key, p.a_ep()->Import(wo->descriptor()));
  FillPattern(p.b_mem(), p.b_mr->size(), 1);
  FillPattern(extra.data(), extra.size(), 2);
  const uint64_t bsize = p.b_mr->size(), asize = p.a_mr->size();
  Endpoint* ep = p.a_ep();
  const MemoryRegion* mr = p.a_mr.get();
  std::vector<Segment> oob_segs = {{0, 0, 10}, {0, bsize - 5, 6}};
  std::vector<Segment> ok_segs = {{0, 0, 10}};

  struct Case {
    const char* what;
    Op op;
    Code want;
  } cases[] = {
      {"write past the end", WriteOp(ep, mr, 0, p.b_key.get(), bsize - 10, 20, 1),
       Code::kOutOfRange},
      {"read past the end", ReadOp(ep, mr, 0, p.b_key.get(), bsize - 10, 20, 1), Code::kOutOfRange},
      {"empty write beyond the end", WriteOp(ep, mr, 0, p.b_key.get(), bsize + 1, 0, 1),
       Code::kOutOfRange},
      {"remote offset wraps", WriteOp(ep, mr, 0, p.b_key.get(), ~uint64_t{0} - 3, 8, 1),
       Code::kOutOfRange},
      {"local past the end", WriteOp(ep, mr, asize - 1, p.b_key.get(), 0, 2, 1), Code::kOutOfRange},
      {"write to read-only", WriteOp(ep, mr, 0, ro_key.get(), 0, 8, 1), Code::kPermissionDenied},
      {"read from write-only", ReadOp(ep, mr, 0, wo_key.get(), 0, 8, 1), Code::kPermissionDenied},
      {"sparse segment past the end",
       SparseOp(OpType::kSparseWrite, ep, mr, p.b_key.get(), oob_segs.data(), oob_segs.size(), 1),
       Code::kOutOfRange},
      {"sparse write to read-only",
       SparseOp(OpType::kSparseWrite, ep, mr, ro_key.get(), ok_segs.data(), ok_segs.size(), 1),
       Code::kPermissionDenied},
      {"sparse read from write-only",
       SparseOp(OpType::kSparseRead, ep, mr, wo_key.get(), ok_segs.data(), ok_segs.size(), 1),
       Code::kPermissionDenied},
      {"send past the local end", SendOp(ep, mr, asize - 3, 4, 1), Code::kOutOfRange},
  };
  for (const Case& c : cases) {
    if ((c.op.type == OpType::kSparseWrite && !caps.sparse_write) ||
        (c.op.type == OpType::kSparseRead && !caps.sparse_read) ||
        (c.op.type == OpType::kSend && !caps.send_recv)) {
      continue;
    }
    Status s = p.a->Post({&c.op, 1});
    EXPECT_EQ(s.code(), c.want) << c.what << ": " << s.ToString();
    EXPECT_NE(s.message().find("op 0"), std::string::npos) << c.what << ": " << s.message();
  }
  // A bad op anywhere in a batch: nothing is posted, and the error names its index.
  FillPattern(p.a_mem(), 64, 3);
  Op batch[] = {WriteOp(ep, mr, 0, p.b_key.get(), 0, 64, 41),
                WriteOp(ep, mr, 0, ro_key.get(), 0, 8, 42)};
  Status s = p.a->Post(batch);
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("op 1"), std::string::npos) << s.message();
  Poller poller = PollerFor(p);
  poller.DriveFor(Millis(200));
  EXPECT_TRUE(poller.queue(p.a.get()).empty()) << "an op of a refused batch completed";
  EXPECT_TRUE(CheckPattern(p.b_mem(), p.b_mr->size(), 1)) << "a refused batch wrote";
  EXPECT_TRUE(CheckPattern(extra.data(), extra.size(), 2));
  // Refused posts do not hurt the endpoint.
  ASSERT_OK(p.a->Post({&batch[0], 1}));
  Completion c;
  ASSERT_TRUE(poller.Await(p.a.get(), 41, &c));
  ASSERT_TRUE(c.ok()) << c.error;
  EXPECT_TRUE(CheckPattern(p.b_mem(), 64, 3));
  EXPECT_TRUE(p.a_ep()->status().ok()) << p.a_ep()->status().ToString();
}

// Cases that only a target-side check can catch. Each attempt runs on a fresh connection (an
// access error may fail an endpoint for good, as an RC queue pair does).
class TargetChecks : public Conformance {
 protected:
  // B layout: [guard 4096][R: 64 KiB rw][guard 4096][Q: 64 KiB read-only][guard 4096].
  static constexpr uint64_t kGuard = 4096, kSize = 65536;
  static constexpr uint64_t kROff = kGuard, kQOff = 2 * kGuard + kSize;
  static constexpr uint64_t kTotal = 3 * kGuard + 2 * kSize;

  void SetUpTarget() {
    PairOptions po;
    po.b_bytes = 4096;
    ASSERT_NO_FATAL_FAILURE(MakePair(&p_, po));
    const Capabilities caps = p_.a->capabilities();
    if (!caps.target_checks && !caps.final_deregistration) return;
    mem_ = Buffer(kTotal);
    FillPattern(mem_.data(), kTotal, 77);
    ASSERT_OK_AND_ASSIGN(r_, p_.b->RegisterMemory(mem_.data() + kROff, kSize, kAccessRemote));
    ASSERT_OK_AND_ASSIGN(q_, p_.b->RegisterMemory(mem_.data() + kQOff, kSize, kAccessRemoteRead));
    image_.assign(mem_.data(), mem_.data() + kTotal);
    FillPattern(p_.a_mem(), p_.a_mr->size(), 78);
  }

  // Imports `region` on a new connection and posts `make(ep, key)`; returns which stage refused
  // it ("import", "post", "completion") or "ok".
  std::string Attempt(const RemoteRegion& region,
                      const std::function<Op(Endpoint*, const RemoteKey*)>& make,
                      Code* code = nullptr) {
    auto conn = ConnectPair(*p_.a, *p_.b, p_.address);
    EXPECT_TRUE(conn.ok()) << StatusText(conn);
    if (!conn.ok()) return "connect failed";
    auto key = conn->client->Import(region);
    if (!key.ok()) return "import";
    Op op = make(conn->client.get(), key->get());
    op.context = ++ctx_;
    Status s = p_.a->Post({&op, 1});
    if (!s.ok()) return "post";
    Poller poller = PollerFor(p_);
    Completion c;
    EXPECT_TRUE(poller.Await(p_.a.get(), op.context, &c));
    if (code != nullptr) *code = c.code;
    if (c.ok()) return "ok";
    EXPECT_FALSE(c.error.empty()) << "error completion without a message";
    return "completion";
  }

  ::testing::AssertionResult TargetUnchanged() {
    return SameBytes("target memory", mem_.data(), image_.data(), kTotal);
  }

  Pair p_;
  Buffer mem_;
  std::unique_ptr<MemoryRegion> r_, q_;
  std::vector<uint8_t> image_;
  uint64_t ctx_ = 0;
};

TEST_P(TargetChecks, DeregisteredRegionIsRefusedByTheTarget) {
  ASSERT_NO_FATAL_FAILURE(SetUpTarget());
  if (!p_.a->capabilities().final_deregistration) {
    GTEST_SKIP()
        << config().name
        << " lacks final_deregistration (UCX_IB_REG_METHODS keeps UCX's registration cache)";
  }
  const MemoryRegion* a_mr = p_.a_mr.get();
  const RemoteRegion old = r_->descriptor();
  // The key works while registered.
  auto write = [&](Endpoint* ep, const RemoteKey* k) {
    return WriteOp(ep, a_mr, 0, k, 100, 1000, 0);
  };
  auto read = [&](Endpoint* ep, const RemoteKey* k) {
    return ReadOp(ep, a_mr, 5000, k, 0, 1000, 0);
  };
  ASSERT_EQ(Attempt(old, write), "ok");
  std::memcpy(image_.data() + kROff + 100, p_.a_mem(), 1000);
  ASSERT_TRUE(TargetUnchanged());

  r_.reset();  // deregister; the memory stays allocated and readable by the test
  EXPECT_NE(Attempt(old, write), "ok") << "write through a deregistered key succeeded";
  EXPECT_TRUE(TargetUnchanged());
  std::vector<uint8_t> a_before(p_.a_mem(), p_.a_mem() + p_.a_mr->size());
  EXPECT_NE(Attempt(old, read), "ok") << "read through a deregistered key succeeded";
  EXPECT_TRUE(SameBytes("initiator destination", p_.a_mem(), a_before.data(), a_before.size()));

  // Registering the same memory again issues a new key; the old one stays dead.
  ASSERT_OK_AND_ASSIGN(r_, p_.b->RegisterMemory(mem_.data() + kROff, kSize, kAccessRemote));
  EXPECT_NE(Attempt(old, write), "ok") << "a stale key reached a new registration";
  EXPECT_TRUE(TargetUnchanged());
  ASSERT_EQ(Attempt(r_->descriptor(), write), "ok");
  std::memcpy(image_.data() + kROff + 100, p_.a_mem(), 1000);
  EXPECT_TRUE(TargetUnchanged());
}

TEST_P(TargetChecks, ForgedDescriptorsAreRefusedByTheTarget) {
  ASSERT_NO_FATAL_FAILURE(SetUpTarget());
  if (!p_.a->capabilities().target_checks) {
    GTEST_SKIP() << config().name
                 << " lacks target_checks (forged descriptors: target_checks=false)";
  }
  const MemoryRegion* a_mr = p_.a_mr.get();
  const RemoteRegion genuine_r = r_->descriptor();
  const RemoteRegion genuine_q = q_->descriptor();
  auto write_at = [&](uint64_t off, uint64_t len) {
    return [=](Endpoint* ep, const RemoteKey* k) { return WriteOp(ep, a_mr, 0, k, off, len, 0); };
  };
  std::vector<uint8_t> a_before(p_.a_mem(), p_.a_mem() + p_.a_mr->size());

  RemoteRegion longer = genuine_r;
  longer.length += kGuard;
  std::string how = Attempt(longer, write_at(kSize, kGuard));
  EXPECT_NE(how, "ok") << "write past the end through an enlarged length";
  EXPECT_TRUE(TargetUnchanged());
  how = Attempt(longer, write_at(kSize - 100, 200));
  EXPECT_NE(how, "ok") << "write straddling the end through an enlarged length";
  EXPECT_TRUE(TargetUnchanged()) << "not one byte may change, not even inside the region";
  how = Attempt(longer, [&](Endpoint* ep, const RemoteKey* k) {
    return ReadOp(ep, a_mr, 0, k, kSize, kGuard, 0);
  });
  EXPECT_NE(how, "ok") << "read past the end through an enlarged length";
  EXPECT_TRUE(
      SameBytes("initiator after refused read", p_.a_mem(), a_before.data(), a_before.size()))
      << "bytes beyond the region leaked to the initiator";

  RemoteRegion writable_q = genuine_q;
  writable_q.access |= kAccessRemoteWrite;
  how = Attempt(writable_q, write_at(0, 100));
  EXPECT_NE(how, "ok") << "write to a read-only region through forged access bits";
  EXPECT_TRUE(TargetUnchanged());

  if (p_.a->capabilities().sparse_write) {
    how = Attempt(longer, [&](Endpoint* ep, const RemoteKey* k) {
      static const Segment segs[] = {{0, 10, 10}, {0, kSize + 10, 10}};
      return SparseOp(OpType::kSparseWrite, ep, a_mr, k, segs, 2, 0);
    });
    EXPECT_NE(how, "ok") << "sparse write with one segment past the end";
    EXPECT_TRUE(TargetUnchanged()) << "not even the in-bounds segment may land";
  }

  // Edited keys: every variant must be refused somewhere and leave the target alone.
  std::mt19937_64 rng(5);
  std::vector<std::pair<std::string, RemoteRegion>> keys;
  for (size_t i : {size_t{0}, genuine_r.rkey.size() / 2, genuine_r.rkey.size() - 1}) {
    if (genuine_r.rkey.empty()) break;
    RemoteRegion k = genuine_r;
    k.rkey[i] ^= 0xff;
    keys.push_back({"rkey byte " + std::to_string(i) + " flipped", k});
  }
  RemoteRegion zero = genuine_r;
  std::fill(zero.rkey.begin(), zero.rkey.end(), 0);
  keys.push_back({"rkey zeroed", zero});
  RemoteRegion random = genuine_r;
  for (auto& b : random.rkey) b = static_cast<uint8_t>(rng());
  keys.push_back({"rkey random", random});
  RemoteRegion empty = genuine_r;
  empty.rkey.clear();
  keys.push_back({"rkey empty", empty});
  for (const auto& [what, k] : keys) {
    if (k.rkey == genuine_r.rkey) continue;
    how = Attempt(k, write_at(0, 100));
    EXPECT_NE(how, "ok") << what;
    EXPECT_TRUE(TargetUnchanged()) << what;
  }

  // An address moved below the region: whatever the backend makes of it, nothing outside the
  // registered range may change.
  RemoteRegion lower = genuine_r;
  lower.addr -= kGuard;
  lower.length += kGuard;
  how = Attempt(lower, write_at(0, kGuard));
  if (how == "ok") std::memcpy(image_.data() + kROff, p_.a_mem(), kGuard);
  EXPECT_TRUE(TargetUnchanged()) << "a write through a lowered address landed outside the region";
}

INSTANTIATE_TEST_SUITE_P(Backends, TargetChecks, ::testing::ValuesIn(SelectedConfigs().run),
                         [](const auto& info) { return info.param.TestName(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TargetChecks);

}  // namespace
}  // namespace ferry::testing
