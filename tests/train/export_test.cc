// Incremental export for serving (ferry-train --export-dir, models/io/export_dir.h): base +
// deltas load as the full model taken at the same moment, bit for bit; evicted keys leave in a
// delta; ferry-predict DIR scores as ferry-predict on the full file; a stream publishes versions
// in order and ends with the final model; damaged manifests and deltas are refused (exit 1).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "models/io/export_dir.h"
#include "models/io/model_reader.h"
#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using ::testing::HasSubstr;

// "" when equal; else the first difference (kind, params, a table's name, dim, keys, float bits).
std::string Differs(const models::Model& a, const models::Model& b) {
  if (a.kind != b.kind) return "kinds differ";
  if (a.params != b.params) return "params differ";
  if (a.tables.size() != b.tables.size()) return "table counts differ";
  for (size_t t = 0; t < a.tables.size(); ++t) {
    const models::ModelTable &x = a.tables[t], &y = b.tables[t];
    if (x.name() != y.name() || x.dim() != y.dim()) return "table " + x.name() + " differs";
    if (x.size() != y.size()) {
      return "table " + x.name() + ": " + std::to_string(x.size()) + " rows against " +
             std::to_string(y.size());
    }
    if (!std::equal(x.keys().begin(), x.keys().end(), y.keys().begin())) {
      return "table " + x.name() + ": other keys";
    }
    if (std::memcmp(x.values().data(), y.values().data(), x.values().size_bytes()) != 0) {
      return "table " + x.name() + ": other float bits";
    }
  }
  return "";
}

models::Model Load(const std::string& dir, uint64_t up_to = UINT64_MAX) {
  auto m = models::LoadExportDir(dir, nullptr, up_to);
  EXPECT_TRUE(m.ok()) << dir << ": " << m.status().ToString();
  return m.ok() ? std::move(*m) : models::Model{};
}

models::ExportManifest Manifest(const std::string& dir) {
  auto m = models::ReadExportManifest(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : models::ExportManifest{};
}

class Export : public ::testing::Test {
 protected:
  void SetUp() override {
    Generate(train_, test_,
             {"--fields", "8", "--features", "5000", "--samples", "4000", "--test-samples", "500",
              "--seed", "5"});
  }
  // 2 servers, 2 workers, tcp, batches of 100, the final model into `out`, versions into `ex`.
  std::vector<std::string> Job(const std::string& model, const std::string& epochs,
                               const std::string& out, const std::string& ex) const {
    return {"--model",   model,  "--train",     train_, "--servers",    "2",
            "--workers", "2",    "--transport", "tcp",  "--batch-size", "100",
            "--epochs",  epochs, "--model-out", out,    "--export-dir", ex};
  }
  // A bsp job (2 servers, 2 workers, tcp) exporting every `every` samples (800: 4 clocks of 100
  // per worker) into `ex`, the final model into `out`.
  TrainRun Bsp(const std::string& tag, const std::string& ex, const std::string& out,
               const std::vector<std::string>& more, const std::string& epochs = "2",
               const std::string& every = "800") {
    return Train(dir_, tag,
                 Cat(Job("ftrl", epochs, out, ex), Cat({"--consistency", "bsp", "--export-every",
                                                        every, "--export-keep-bases", "0"},
                                                       more)),
                 60);
  }
  TempDir dir_;
  const std::string train_ = dir_ / "tr.svm", test_ = dir_ / "te.svm";
};

// Two bsp runs with the same seeds, a version every clock: A with a base every 3 versions, B
// with only bases (each a full export). Every version of A, loaded as base + deltas, is B's base
// of that version: a row a delta missed or kept stale would differ. The last one is --model-out,
// and the version at the end of the first pass is the model of a job of one pass.
TEST_F(Export, BspBaseAndDeltasEqualFullExportsAtTheSameClocks) {
  const std::string a = dir_ / "a", b = dir_ / "b";
  TrainRun ra = Bsp("a", a, dir_ / "a.bin", {"--base-every", "3"}, "2", "200");
  ASSERT_TRUE(ra.ok()) << ra.proc.Describe();
  TrainRun rb = Bsp("b", b, dir_ / "b.bin", {"--base-every", "1"}, "2", "200");
  ASSERT_TRUE(rb.ok()) << rb.proc.Describe();
  const models::ExportManifest ma = Manifest(a), mb = Manifest(b);
  ASSERT_GE(ma.entries.size(), 40u);
  ASSERT_EQ(ma.entries.size(), mb.entries.size());
  size_t deltas = 0, smaller = 0;
  for (size_t i = 0; i < ma.entries.size(); ++i) {
    const models::ExportEntry &ea = ma.entries[i], &eb = mb.entries[i];
    ASSERT_EQ(ea.version, eb.version);
    EXPECT_EQ(ea.samples, eb.samples);
    EXPECT_EQ(ea.base, i % 3 == 0) << "version " << ea.version;
    EXPECT_TRUE(eb.base);
    const models::Model full = Load(b, eb.version);
    EXPECT_EQ(Differs(Load(a, ea.version), full), "") << "version " << ea.version;
    if (ea.base) continue;
    ++deltas;
    auto delta = models::ReadModelFile(a + "/" + ea.file);
    ASSERT_TRUE(delta.ok()) << delta.status().ToString();
    const auto* rows = delta->FindTable("weights");
    ASSERT_NE(rows, nullptr);
    smaller += rows->size() < full.tables[0].size();
  }
  EXPECT_GE(deltas, 20u);
  EXPECT_GE(smaller, 1u) << "no delta was smaller than the model: not deltas";
  auto final_model = models::ReadModelFile(dir_ / "a.bin");
  ASSERT_TRUE(final_model.ok());
  EXPECT_EQ(Differs(Load(a), *final_model), "");
  // A job of one pass: its last version counts worker 0's samples of the pass (x 2), and so does
  // A's version at the end of its first pass (the first with that count).
  TrainRun rc = Bsp("c", dir_ / "c", dir_ / "c.bin", {}, "1");
  ASSERT_TRUE(rc.ok()) << rc.proc.Describe();
  auto one_pass = models::ReadModelFile(dir_ / "c.bin");
  ASSERT_TRUE(one_pass.ok());
  const uint64_t pass_samples = Manifest(dir_ / "c").entries.back().samples;
  const auto at = std::find_if(ma.entries.begin(), ma.entries.end(),
                               [&](const auto& e) { return e.samples == pass_samples; });
  ASSERT_NE(at, ma.entries.end());
  models::Model end_of_pass = Load(a, at->version);
  end_of_pass.params = one_pass->params;  // they name the passes
  EXPECT_EQ(Differs(end_of_pass, *one_pass), "") << "version " << at->version;
}

TEST_F(Export, PredictOnTheDirectoryEqualsPredictOnTheFullModel) {
  const std::string ex = dir_ / "ex";
  TrainRun r = Bsp("p", ex, dir_ / "full.bin", {"--base-every", "4"});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  ASSERT_FALSE(Manifest(ex).entries.back().base);  // the newest version is a delta
  Proc full = Exec({PredictBin(), dir_ / "full.bin", test_}, 30);
  Proc dir = Exec({PredictBin(), ex, test_}, 30);
  ASSERT_EQ(full.exit_code, 0) << full.Describe();
  ASSERT_EQ(dir.exit_code, 0) << dir.Describe();
  EXPECT_EQ(Lines(dir.out).size(), 500u);
  EXPECT_EQ(dir.out, full.out);
}

// asp with a row bound far below the vocabulary: rows leave between versions.
TEST_F(Export, EvictedKeysAreRemovedInADeltaAndAbsentFromTheLoadedModel) {
  const std::string ex = dir_ / "ex";
  const std::string full = dir_ / "full.bin";
  TrainRun r = Train(dir_, "evict",
                     Cat(Job("ftrl", "4", full, ex),
                         {"--max-rows-per-server", "400", "--evict-tick", "0.01",  // bound
                          "--export-every", "2000", "--base-every", "100"}),
                     60);
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  const models::ExportManifest m = Manifest(ex);
  ASSERT_GE(m.entries.size(), 3u);
  size_t removed = 0;
  for (const models::ExportEntry& e : m.entries) {
    if (e.base) continue;
    auto delta = models::ReadModelFile(ex + "/" + e.file);
    ASSERT_TRUE(delta.ok()) << delta.status().ToString();
    const models::ModelTable* gone = delta->FindTable("removed:weights");
    ASSERT_NE(gone, nullptr);
    const models::Model at = Load(ex, e.version);
    const models::ModelTable* w = at.FindTable("weights");
    ASSERT_NE(w, nullptr);
    for (uint64_t key : gone->keys()) EXPECT_EQ(w->Find(key), nullptr) << key;
    removed += gone->size();
  }
  EXPECT_GT(removed, 0u) << "no delta removed a key";
  auto final_model = models::ReadModelFile(full);
  ASSERT_TRUE(final_model.ok());
  EXPECT_EQ(Differs(Load(ex), *final_model), "");
}

TEST_F(Export, AStreamPublishesVersionsInOrderAndEndsWithTheFinalModel) {
  const std::string ex = dir_ / "ex", out = dir_ / "m.bin";
  std::string cmd = "'" + GenBin() + "' --stream --samples 40000 --fields 8 --seed 11 | '" +
                    TrainBin() + "' --train - --model ftrl --transport tcp --window 5000 " +
                    "--progress never -q --export-every 10000 --base-every 2 --export-dir '" + ex +
                    "' --model-out '" + out + "'";
  Proc p = Exec({"/bin/sh", "-c", cmd}, 90);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  const models::ExportManifest m = Manifest(ex);
  // Versions at 10k, 20k and 30k samples, at 40k when the last window's round reaches it before
  // the stream ends (timing: the windows are dealt to 2 workers), and at the end: 4 or 5, bases
  // every 2nd, pruned to the last 2 bases with their deltas (v1-v4, or v3-v5: 3 entries).
  ASSERT_GE(m.entries.size(), 3u);
  EXPECT_GE(m.entries.back().version, 4u);
  EXPECT_TRUE(m.entries.front().base);
  for (size_t i = 1; i < m.entries.size(); ++i) {
    EXPECT_EQ(m.entries[i].version, m.entries[i - 1].version + 1);
    EXPECT_GE(m.entries[i].samples, m.entries[i - 1].samples);
  }
  EXPECT_EQ(m.entries.back().samples, 40000u);
  auto full = models::ReadModelFile(out);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(Differs(Load(ex), *full), "");
}

// Damage to a copy of a good directory; ferry-predict names it and exits 1.
TEST_F(Export, DamagedManifestsAndDeltasAreRefused) {
  const std::string ex = dir_ / "ex";
  TrainRun r = Bsp("d", ex, dir_ / "full.bin", {"--base-every", "100"});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  const models::ExportManifest m = Manifest(ex);
  ASSERT_FALSE(m.entries.back().base);
  const std::string manifest = Slurp(ex + "/MANIFEST");
  const std::string delta_name = m.entries.back().file;
  const std::string delta = Slurp(ex + "/" + delta_name);
  const auto refused = [&](const std::string& file, const std::string& bytes,
                           const std::string& says) {
    const std::string bad = dir_ / "bad";
    std::filesystem::remove_all(bad);
    std::filesystem::copy(ex, bad);
    WriteText(bad + "/" + file, bytes);
    Proc p = Exec({PredictBin(), bad, test_}, 30);
    EXPECT_EQ(p.exit_code, 1) << p.Describe();
    EXPECT_THAT(p.err, HasSubstr(says)) << p.Describe();
    auto loaded = models::LoadExportDir(bad);
    EXPECT_FALSE(loaded.ok());
  };
  refused("MANIFEST", manifest.substr(0, manifest.size() / 2), "export manifest is truncated");
  refused("MANIFEST", manifest.substr(0, manifest.rfind("end ")), "no end line");
  std::string flipped = manifest;
  flipped[manifest.find("delta-") + 7] ^= 1;  // still a valid name: only the checksum tells
  refused("MANIFEST", flipped, "checksum mismatch");
  refused(delta_name, delta.substr(0, delta.size() - 30), "truncated");
  std::string bits = delta;
  bits[bits.size() / 2] ^= 0x10;
  refused(delta_name, bits, "corrupt");
  // A delta left out of the chain: the next one does not follow its predecessor.
  models::ExportManifest gap = m;
  gap.entries.erase(gap.entries.end() - 2);
  refused("MANIFEST", models::EncodeExportManifest(gap), "the delta follows version");
  // Flags.
  Proc bad_every =
      Exec({TrainBin(), "--train", train_, "--export-dir", ex, "--export-every", "10x"}, 30);
  EXPECT_NE(bad_every.exit_code, 0);
  EXPECT_THAT(bad_every.err, HasSubstr("--export-every '10x'"));
  Proc no_dir = Exec({TrainBin(), "--train", train_, "--export-every", "30s"}, 30);
  EXPECT_NE(no_dir.exit_code, 0);
  EXPECT_THAT(no_dir.err, HasSubstr("--export-dir"));
}

// The pure parts, no job: a manifest round trip, and deltas that do not fit the model.
TEST(ExportFormat, ManifestRoundTripsAndBadDeltasLeaveTheModelUnchanged) {
  models::ExportManifest m;
  m.entries = {{1, true, models::ExportFileName(1, true), 10, 5},
               {2, false, models::ExportFileName(2, false), 20, 6}};
  auto back = models::ParseExportManifest(models::EncodeExportManifest(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->entries.size(), 2u);
  EXPECT_EQ(back->entries[1].file, "delta-000002.model");
  EXPECT_FALSE(back->entries[1].base);
  m.entries[1].version = 1;
  EXPECT_THAT(models::ParseExportManifest(models::EncodeExportManifest(m)).status().ToString(),
              HasSubstr("does not follow"));

  models::Model model;
  model.tables.emplace_back("weights", 1);
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> values = {0.5f, 1.5f, 2.5f};
  ASSERT_TRUE(model.tables[0].Append(keys, values).ok());
  const auto delta = [](std::vector<uint64_t> changed, std::vector<uint64_t> removed,
                        uint32_t dim) {
    models::Model d;
    d.tables.emplace_back("weights", dim);
    d.tables.emplace_back(models::RemovedTableName("weights"), 1);
    EXPECT_TRUE(d.tables[0].Append(changed, std::vector<float>(changed.size() * dim, 9)).ok());
    EXPECT_TRUE(d.tables[1].Append(removed, std::vector<float>(removed.size(), 0)).ok());
    return d;
  };
  EXPECT_THAT(models::ApplyExportDelta(&model, delta({}, {7}, 1), 1).ToString(),
              HasSubstr("lacks"));
  EXPECT_THAT(models::ApplyExportDelta(&model, delta({2}, {2}, 1), 1).ToString(),
              HasSubstr("both changes and removes key 2"));
  EXPECT_THAT(models::ApplyExportDelta(&model, delta({2}, {}, 2), 1).ToString(),
              HasSubstr("another dim"));
  ASSERT_EQ(model.tables[0].size(), 3u);
  ASSERT_TRUE(models::ApplyExportDelta(&model, delta({2, 4}, {1}, 1), 1).ok());
  const models::ModelTable& t = model.tables[0];
  EXPECT_EQ(std::vector<uint64_t>(t.keys().begin(), t.keys().end()),
            (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(std::vector<float>(t.values().begin(), t.values().end()),
            (std::vector<float>{9, 2.5f, 9}));
}

}  // namespace
}  // namespace ferry::train_test
