// ferry-gen's flags, their resolution into GenOptions, and the run (see cli.h).
#include "tools/gen/cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <optional>

#include "tools/common/command.h"
#include "tools/common/output.h"

namespace ferry::gen {

using tools::Printf;

void AddFlags(CLI::App& app, GenFlags& f) {
  models::GenOptions& o = f.direct;
  app.add_option("--samples", f.samples,
                 "training samples (e.g. 1000000, 1e6, 1M); required without --stream, with it "
                 "the stream's length (endless without)");
  app.add_option("--out", o.out, "training file to write (required without --stream)");
  app.add_option("--test-samples", f.test_samples, "held-out samples, written to --test-out")
      ->capture_default_str();
  app.add_option("--test-out", o.test_out, "held-out file to write");
  app.add_option("--format", f.format, "output format: libsvm, libffm or criteo")
      ->capture_default_str()
      ->check(CLI::IsMember({"libsvm", "libffm", "criteo"}));
  app.add_option("--layout", f.layout, "ctr (one value per field) or text (bags of words)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ctr", "text"}));
  app.add_option("--fields", o.fields, "categorical fields (criteo: 26; not text)")
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "distinct values per field; text: words in the vocabulary")
      ->capture_default_str();
  app.add_option("--features", f.features,
                 "total distinct values over all fields instead of --vocab (e.g. 16777216)");
  app.add_option("--zipf", o.zipf, "Zipf exponent of value / word frequencies (0: uniform)")
      ->capture_default_str();
  app.add_option("--words", o.words, "text: mean tokens per document")->capture_default_str();
  app.add_option("--numeric", o.numeric, "count-valued numeric features (criteo: 13)")
      ->capture_default_str();
  app.add_option("--truth", f.truth, "hidden model: lr, fm, ffm or mlp (text: lr)")
      ->capture_default_str()
      ->check(CLI::IsMember({"lr", "fm", "ffm", "mlp"}));
  app.add_option("--factors", o.factors, "fm, ffm: factor length; mlp: embedding length")
      ->capture_default_str();
  app.add_option("--hidden", o.hidden, "mlp: hidden units")->capture_default_str();
  app.add_option("--logit-sd", o.logit_sd,
                 "standard deviation of the truth's logits, (0, 10]: 1.5 gives a Bayes AUC "
                 "about 0.82, 4 about 0.95")
      ->capture_default_str();
  app.add_option("--positive-rate", o.positive_rate, "mean click probability, (0, 1)")
      ->capture_default_str();
  app.add_option("--truth-out", o.truth_out, "write the truth model (text) to this file");
  app.add_flag("--gzip", o.gzip, "gzip the data files (level 1)");
  app.add_option("--seed", o.seed, "random seed: same flags and seed, same bytes")
      ->capture_default_str();
  app.add_flag("-q,--quiet", f.quiet, "do not print the summary");
  app.add_flag("--stream", f.stream,
               "write the training samples to stdout, endless unless --samples; no summary, no "
               "--out, --test-samples, --test-out or --gzip; a closed pipe ends it with status 0");
  app.add_option("--rate", f.rate,
                 "--stream: at most this many samples per second (paced by sleeping, output "
                 "flushed before each pause); default: as fast as the reader takes them");
  app.add_option("--drift", o.drift,
                 "in [0, 1]: every --drift-every samples this fraction of each field's values "
                 "retires (as many fresh ids start) and about this fraction of the ids' truth is "
                 "redrawn; ctr only, no --test-samples or --truth-out; field f's indices start "
                 "at f * 2^24 + 1 below 256 fields (docs/data-formats.md, Streams)")
      ->capture_default_str();
  app.add_option("--drift-every", f.drift_every, "samples per drift epoch")->capture_default_str();
}

Result<uint64_t> ParseCount(const std::string& flag, const std::string& text) {
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  size_t used = r.ec == std::errc() ? static_cast<size_t>(r.ptr - text.data()) : 0;
  double mult = 1;
  if (used + 1 == text.size()) {
    switch (text[used]) {
      case 'k':
      case 'K':
        mult = 1e3;
        break;
      case 'm':
      case 'M':
        mult = 1e6;
        break;
      case 'g':
      case 'G':
        mult = 1e9;
        break;
      default:
        used = 0;
    }
  } else if (used != text.size()) {
    used = 0;
  }
  v *= mult;
  if (used == 0 || !(v >= 0) || v > 1e15 || v != static_cast<double>(static_cast<uint64_t>(v))) {
    return InvalidArgument(flag + " '" + text + "' is not a count (e.g. 1000000, 1e6 or 1M)");
  }
  return static_cast<uint64_t>(v);
}

// The flags that depend on --stream: --samples (optional with it), --rate (only with it), and
// the file flags a stream has no use for.
Status ResolveStream(const GenFlags& f, models::GenOptions* o) {
  if (!f.stream) {
    if (f.samples.empty()) {
      return InvalidArgument("--samples is required (or --stream for an endless stream)");
    }
    if (f.rate_given) return InvalidArgument("--rate applies to --stream only");
    return Status::Ok();
  }
  if (!o->out.empty()) return InvalidArgument("--stream writes to stdout: drop --out");
  if (o->test_samples > 0 || !o->test_out.empty()) {
    return InvalidArgument(
        "--stream has no --test-samples / --test-out: write a test file with a run without "
        "--stream and the same flags");
  }
  if (o->gzip) return InvalidArgument("--stream writes plain text: pipe it through gzip");
  if (f.rate_given && !(f.rate > 0 && f.rate <= 1e9)) {
    return InvalidArgument("--rate must be a positive number of samples per second (at most 1e9)");
  }
  if (!f.samples.empty() && o->samples == 0) {
    return InvalidArgument("--samples must be at least 1 (leave it out for an endless stream)");
  }
  return Status::Ok();
}

Result<models::GenOptions> Resolve(const GenFlags& f) {
  models::GenOptions o = f.direct;
  if (!f.samples.empty()) {
    FERRY_ASSIGN_OR_RETURN(o.samples, ParseCount("--samples", f.samples));
  }
  FERRY_ASSIGN_OR_RETURN(o.drift_every, ParseCount("--drift-every", f.drift_every));
  FERRY_ASSIGN_OR_RETURN(o.test_samples, ParseCount("--test-samples", f.test_samples));
  FERRY_ASSIGN_OR_RETURN(o.features, ParseCount("--features", f.features));
  FERRY_ASSIGN_OR_RETURN(o.format, models::ParseFormat(f.format));
  FERRY_ASSIGN_OR_RETURN(o.truth, models::ParseTruth(f.truth));
  FERRY_ASSIGN_OR_RETURN(o.layout, models::ParseLayout(f.layout));
  const bool text = o.layout == models::Layout::kText;
  if (text && f.fields_given) {
    return InvalidArgument(
        "--fields does not apply to --layout text (the vocabulary is one field; use --vocab)");
  }
  if (!text && f.words_given) return InvalidArgument("--words applies to --layout text only");
  if (o.format == models::Format::kCriteo && !text) {
    if (!f.fields_given) o.fields = models::kCriteoCatColumns;
    if (!f.numeric_given) o.numeric = models::kCriteoIntColumns;
  }
  FERRY_RETURN_IF_ERROR(ResolveStream(f, &o));
  return o;
}

std::string FormatSummary(const models::GenOptions& o, const models::GenSummary& s) {
  std::string out =
      Printf("wrote %llu samples to %s (positive rate %.4f)\n",
             static_cast<unsigned long long>(s.samples), o.out.c_str(), s.positive_rate);
  if (s.test_samples > 0) {
    out += Printf("wrote %llu samples to %s (positive rate %.4f)\n",
                  static_cast<unsigned long long>(s.test_samples), o.test_out.c_str(),
                  s.test_positive_rate);
  }
  if (!o.truth_out.empty()) out += "wrote the truth model to " + o.truth_out + "\n";
  const std::string truth(models::TruthName(o.truth));
  if (o.layout == models::Layout::kText) {
    out += Printf(
        "truth %s on text: %llu words; %.1f tokens, %.1f distinct words per document; "
        "bias %.4f, scale %.4f\n",
        truth.c_str(), static_cast<unsigned long long>(s.total_vocab), s.mean_tokens,
        s.mean_features, s.bias, s.scale);
  } else {
    out += Printf(
        "truth %s: %llu categorical values in %u fields, %u numeric; bias %.4f, scale %.4f\n",
        truth.c_str(), static_cast<unsigned long long>(s.total_vocab), o.fields, o.numeric, s.bias,
        s.scale);
  }
  out += Printf("bayes (truth model on the %s set): logloss %.5f  auc %.5f\n",
                s.on_test ? "test" : "training", s.bayes_logloss, s.bayes_auc);
  return out;
}

int ParseAndExecute(CLI::App& app, GenFlags& f, int argc, char** argv) {
  if (std::optional<int> code = tools::ParseCommandLine(app, argc, argv)) return *code;
  f.fields_given = app.count("--fields") > 0;
  f.words_given = app.count("--words") > 0;
  f.numeric_given = app.count("--numeric") > 0;
  f.rate_given = app.count("--rate") > 0;
  auto o = Resolve(f);
  if (!o.ok()) return tools::ReportError("ferry-gen", o.status().message(), 2);
  if (f.stream) {
    // A reader that goes away (`ferry-gen --stream | head`) is the normal end of an endless
    // stream: write() then fails with EPIPE, which GenerateStream takes as the end.
    std::signal(SIGPIPE, SIG_IGN);
    auto streamed =
        models::GenerateStream(*o, {.samples = o->samples, .rate = f.rate, .fd = STDOUT_FILENO});
    if (!streamed.ok()) {
      const bool usage = streamed.status().code() == Code::kInvalidArgument;
      return tools::ReportError("ferry-gen", streamed.status().message(), usage ? 2 : 1);
    }
    return 0;
  }
  auto summary = models::Generate(*o);
  if (!summary.ok()) {
    const bool usage = summary.status().code() == Code::kInvalidArgument;
    return tools::ReportError("ferry-gen", summary.status().message(), usage ? 2 : 1);
  }
  if (!f.quiet) std::fputs(FormatSummary(*o, *summary).c_str(), stdout);
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app;
  tools::SetUpCommand(
      app,
      {.name = "ferry-gen",
       .summary = "synthetic CTR data or text documents for ferry-train",
       .description =
           "--layout ctr: Zipf-distributed categorical fields and optional numeric "
           "features, labelled by a\nhidden lr / fm / ffm / mlp truth model, written as "
           "LIBSVM, libffm or Criteo TSV.\n--layout text: bag-of-words documents (Zipf "
           "word frequencies, log-normal lengths, tf-idf\nvalues of unit L2 norm), labelled by "
           "a hidden lr over words, written as LIBSVM or libffm.\nPlain or gzip. "
           "--logit-sd and --positive-rate set how separable the classes are and how\n"
           "many are positive; the summary gives the truth model's own logloss and AUC.\n"
           "--stream writes the training samples to stdout instead, endless unless --samples,\n"
           "paced with --rate; without --drift they are the training file's bytes. --drift D\n"
           "makes an input that does not stand still: every --drift-every samples a fraction D\n"
           "of each field's values retires (fresh ids start as the most frequent, old ones fade\n"
           "down the ranks and drop off the tail) and about D of the ids' truth is redrawn, so\n"
           "a trained model gets worse at each boundary until it learns again.",
       .examples = {"ferry-gen --samples 1M --out train.svm",
                    "ferry-gen --samples 10M --test-samples 1M --test-out test.svm --out "
                    "train.svm --features 16777216 --truth fm --truth-out truth.txt --gzip",
                    "ferry-gen --format criteo --samples 100K --out day_0.tsv",
                    "ferry-gen --truth ffm --fields 10 --samples 1M --out train.ffm "
                    "--format libffm",
                    "ferry-gen --layout text --vocab 20000 --words 100 --logit-sd 4 "
                    "--samples 20K --test-samples 5K --test-out test.svm --out train.svm",
                    "ferry-gen --stream --drift 0.1 --drift-every 1M --rate 50000 > /tmp/ctr.fifo",
                    "ferry-gen --stream --samples 1M --format libffm | gzip > train.ffm.gz"},
       .see_also = {"ferry-train", "docs/data-formats.md"}});
  GenFlags flags;
  AddFlags(app, flags);
  return ParseAndExecute(app, flags, argc, argv);
}

}  // namespace ferry::gen
