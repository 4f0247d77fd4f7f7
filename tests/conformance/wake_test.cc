// Transport::Wake: a thread sleeping in Wait() must come back promptly when another thread calls
// Wake(), and a Wake() that precedes the Wait() makes that Wait() return at once. Both with the
// caller driving progress and with an internal progress thread. The bound checked is "well before
// the Wait's own timeout", never a latency figure.
#include <thread>

#include "tests/conformance/harness.h"

namespace ferry::testing {
namespace {

constexpr Millis kLongWait{30000};
constexpr auto kPrompt = std::chrono::seconds(10);  // a third of kLongWait

void ExpectWakeInterruptsWait(Transport& t) {
  // Wake from another thread while this one sleeps.
  std::thread waker([&t] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t.Wake();
  });
  auto start = Clock::now();
  Status s = t.Wait(kLongWait);
  waker.join();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(Clock::now() - start, kPrompt) << "Wait ignored a Wake from another thread";

  // A Wake before the Wait: that Wait returns without sleeping out its timeout.
  t.Wake();
  start = Clock::now();
  s = t.Wait(kLongWait);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(Clock::now() - start, kPrompt) << "a pending Wake was lost";
}

TEST_P(Conformance, WakeInterruptsWait) {
  std::unique_ptr<Transport> t;
  ASSERT_OK_AND_ASSIGN(t, MakeTransport(config(), TransportOptions()));
  ExpectWakeInterruptsWait(*t);
}

TEST_P(Conformance, WakeInterruptsWaitWithProgressThread) {
  TransportOptions o;
  o.progress_thread = true;
  std::unique_ptr<Transport> t;
  ASSERT_OK_AND_ASSIGN(t, MakeTransport(config(), o));
  ExpectWakeInterruptsWait(*t);
}

}  // namespace
}  // namespace ferry::testing
