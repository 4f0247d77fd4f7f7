#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ps/store/array_hash_map.h"

namespace ferry::ps {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "ferry_snap_" + std::to_string(getpid()) + "_" + name;
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteFile(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class Snapshot : public ::testing::Test {
 protected:
  void SetUp() override {
    o_.dim = 5;
    o_.state_floats = OptimizerStateFloats(Optimizer::kFtrl, 5);
    auto m = ArrayHashMap::Create(o_);
    ASSERT_TRUE(m.ok());
    m_ = std::move(m).value();
    for (uint64_t k = 0; k < 5000; ++k) {
      auto r = m_->Access(k * 1000003);
      ASSERT_TRUE(r.ok());
      m_->Embedding(r->row)[4] = static_cast<float>(k);
      m_->State(r->row)[9] = static_cast<float>(k) * 2;
      if (k % 10 == 0) m_->AdvanceTick();
    }
    for (uint64_t k = 0; k < 5000; k += 7) ASSERT_TRUE(m_->Erase(k * 1000003));
    path_ = TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(m_->SaveSnapshot(path_).ok());
  }
  void TearDown() override {
    std::remove(path_.c_str());
    std::remove((path_ + ".bad").c_str());
  }

  TableOptions o_;
  std::unique_ptr<ArrayHashMap> m_;
  std::string path_;
};

TEST_F(Snapshot, RoundTripRestoresRowsIndexFreeListAndTick) {
  struct stat st {};
  EXPECT_NE(stat((path_ + ".tmp").c_str(), &st), 0) << "the temporary name is renamed away";
  auto r = ArrayHashMap::LoadSnapshot(path_, o_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ArrayHashMap& m = **r;
  EXPECT_EQ(m.size(), m_->size());
  EXPECT_EQ(m.high_water(), m_->high_water());
  EXPECT_EQ(m.free_slots(), m_->free_slots());
  EXPECT_EQ(m.tick(), m_->tick());
  for (uint64_t k = 0; k < 5000; ++k) {
    uint8_t* row = m.Find(k * 1000003);
    if (k % 7 == 0) {
      ASSERT_EQ(row, nullptr);
      continue;
    }
    ASSERT_NE(row, nullptr);
    ASSERT_EQ(m.Embedding(row)[4], static_cast<float>(k));
    ASSERT_EQ(m.State(row)[9], static_cast<float>(k) * 2);
    ASSERT_EQ(ArrayHashMap::Meta(row)->last_seen,
              ArrayHashMap::Meta(m_->Find(k * 1000003))->last_seen);
  }
  // Holes are reused after restore, and the table keeps growing normally.
  auto ins = m.Insert(42);
  ASSERT_TRUE(ins.ok());
  EXPECT_LT(ins->slot, m.high_water());
  for (uint64_t k = 0; k < 20000; ++k) ASSERT_TRUE(m.Insert(k + (1ull << 40)).ok());
  EXPECT_NE(m.Find(0 + (1ull << 40)), nullptr);
}

// Asynchronous checkpoints: the copy taken now is written later, after the table changed, and
// the file is the one SaveSnapshot wrote at the capture, byte for byte.
TEST_F(Snapshot, CaptureWritesTheTableAsItWasAtTheCapture) {
  SnapshotImage first;
  ASSERT_TRUE(m_->CaptureSnapshot(&first).ok());
  SnapshotImage image = std::move(first);  // moves keep the copy
  const SnapshotImage* img = &image;
  EXPECT_GE(img->bytes(), m_->high_water() * m_->layout().stride);
  for (uint64_t k = 1; k < 5000; k += 3) {
    if (uint8_t* row = m_->Find(k * 1000003)) m_->Embedding(row)[0] = -1.0f;
  }
  for (uint64_t k = 0; k < 30000; ++k) ASSERT_TRUE(m_->Insert(k + (1ull << 41)).ok());  // grows
  const std::string later = path_ + ".bad";
  ASSERT_TRUE(img->WriteTo(later).ok());
  EXPECT_EQ(ReadFile(later), ReadFile(path_));
  auto back = ArrayHashMap::LoadSnapshot(later, o_);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->size(), 5000u - 715u);
  EXPECT_EQ((*back)->Find(1ull << 41), nullptr);
  // A capture into the same image (now too small: the table grew) reallocates; the next one
  // reuses; both write what SaveSnapshot writes at that moment.
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(m_->CaptureSnapshot(&image).ok());
    ASSERT_TRUE(image.WriteTo(later).ok());
    ASSERT_TRUE(m_->SaveSnapshot(path_).ok());
    EXPECT_EQ(ReadFile(later), ReadFile(path_)) << "round " << round;
    ASSERT_TRUE(m_->Erase((1ull << 41) + static_cast<uint64_t>(round)));
  }
}

TEST_F(Snapshot, LayoutMismatchIsRefused) {
  TableOptions other = o_;
  other.dim = 6;
  EXPECT_EQ(ArrayHashMap::LoadSnapshot(path_, other).status().code(), Code::kInvalidArgument);
}

TEST_F(Snapshot, TruncatedIsRefused) {
  const std::vector<char> bytes = ReadFile(path_);
  const std::string bad = path_ + ".bad";
  for (size_t len : {size_t{0}, size_t{100}, size_t{4096}, bytes.size() / 2, bytes.size() - 1}) {
    WriteFile(bad, std::vector<char>(bytes.begin(), bytes.begin() + static_cast<long>(len)));
    auto r = ArrayHashMap::LoadSnapshot(bad, o_);
    ASSERT_FALSE(r.ok()) << "length " << len;
    EXPECT_EQ(r.status().code(), Code::kProtocol) << r.status().ToString();
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
  }
  std::vector<char> longer = bytes;
  longer.push_back(0);
  WriteFile(bad, longer);
  EXPECT_EQ(ArrayHashMap::LoadSnapshot(bad, o_).status().code(), Code::kProtocol);
}

TEST_F(Snapshot, CorruptedSectionsAreRefused) {
  const std::vector<char> bytes = ReadFile(path_);
  const std::string bad = path_ + ".bad";
  // One flipped bit in the header, the rows, the live bitmap, the index, and padding.
  const size_t rows = 4096;
  const size_t stride = m_->layout().stride;
  const size_t live = (rows + m_->high_water() * stride + 4095) / 4096 * 4096;
  for (size_t at :
       {size_t{20}, size_t{200}, rows + 3, rows + stride * 100 + 30, live + 1, bytes.size() - 8}) {
    std::vector<char> copy = bytes;
    copy[at] = static_cast<char>(copy[at] ^ 0x10);
    WriteFile(bad, copy);
    auto r = ArrayHashMap::LoadSnapshot(bad, o_);
    ASSERT_FALSE(r.ok()) << "flip at " << at;
    EXPECT_EQ(r.status().code(), Code::kProtocol) << r.status().ToString();
  }
  EXPECT_EQ(ArrayHashMap::LoadSnapshot(TempPath("missing"), o_).status().code(), Code::kIoError);
}

TEST_F(Snapshot, RandomCorruptionIsAlwaysRefused) {
  const std::vector<char> bytes = ReadFile(path_);
  const std::string bad = path_ + ".bad";
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<char> copy = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = rng() % copy.size();
      copy[at] = static_cast<char>(copy[at] ^ static_cast<char>(1 + rng() % 255));
    }
    WriteFile(bad, copy);
    auto r = ArrayHashMap::LoadSnapshot(bad, o_);
    ASSERT_FALSE(r.ok()) << "trial " << trial;
    ASSERT_TRUE(r.status().code() == Code::kProtocol || r.status().code() == Code::kInvalidArgument)
        << r.status().ToString();
  }
}

TEST(SnapshotIo, UnwritableDirectoryIsAnError) {
  auto m = ArrayHashMap::Create(TableOptions{});
  ASSERT_TRUE(m.ok());
  Status s = (*m)->SaveSnapshot("/nonexistent-dir-ferry/x.snap");
  EXPECT_EQ(s.code(), Code::kIoError) << s.ToString();
}

}  // namespace
}  // namespace ferry::ps
