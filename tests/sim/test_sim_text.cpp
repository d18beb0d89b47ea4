// Byte-level language modelling ([data] text): the windows and the seeded split against the
// corpus bytes, the bad input refused, the validation loss (where it is written, what it is,
// and that computing it changes nothing training sees), tied embeddings.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "halfway/names.hpp"
#include "halfway/sim/data.hpp"
#include "halfway/sim/trainer.hpp"
#include "scratch.hpp"

using namespace halfway;
using namespace halfway::sim;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) { return halfway_test::scratch_dir("text", name); }

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

using halfway_test::slurp;

/// A deterministic corpus of printable bytes with little repetition.
std::string corpus_of(size_t n) {
  std::string s(n, ' ');
  uint64_t x = 12345;
  for (char& c : s) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = char(' ' + (x >> 33) % 95);
  }
  return s;
}

std::string config(const std::string& text_key, const std::string& extra_data = "",
                   const std::string& model_extra = "", const std::string& policy = "fp32") {
  return R"(
[model]
kind = "transformer"
vocab = 256
seq_len = 8
d_model = 16
heads = 2
blocks = 2
causal = true
)" + model_extra + R"(
[data]
)" + text_key + "\nbatch_size = 4\nshuffle = true\n" + extra_data + R"(
[loss]
kind = "cross_entropy"
[optimizer]
kind = "adamw"
lr = 0.01
[precision]
policy = ")" + policy + R"("
[run]
steps = 5
seed = 3
)";
}

std::vector<StepRow> rows_of(const TrainConfig& c, int threads = 1) {
  std::vector<StepRow> rows;
  TrainOptions o;
  o.threads = threads;
  train(c, o, [&](const StepRow& r, const StepTrace*, const std::vector<Param>&,
                  const std::vector<std::vector<float>>&) { rows.push_back(r); });
  return rows;
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  INFO("expecting an error mentioning: " << fragment);
  try {
    f();
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(fragment) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

/// The bits of a double, so that NaN == NaN and -0 != +0.
uint64_t bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

}  // namespace

TEST_CASE("text windows are the corpus' bytes, split once and disjointly", "[sim][text]") {
  const int T = 7;
  const std::string corpus = corpus_of(1000);
  const int64_t n = (1000 - 1) / T;  // windows start every T bytes and need T + 1 of them
  const TextSplit s = text_windows(corpus, T, 0.2, 11);
  CHECK(s.val.n() == std::llround(0.2 * double(n)));
  CHECK(s.train.n() + s.val.n() == n);
  std::set<int64_t> starts;
  std::vector<int64_t> train_starts;
  for (const Dataset* d : {&s.train, &s.val}) {
    CHECK(d->x_ids);
    CHECK(d->y_labels);
    CHECK(d->x_shape == Shape{d->n(), T});
    CHECK(d->y_shape == Shape{d->n(), T});
    for (int64_t i = 0; i < d->n(); ++i) {
      std::string x, y;
      for (int t = 0; t < T; ++t) {
        x += char(int(d->x[size_t(i * T + t)]));
        y += char(int(d->y[size_t(i * T + t)]));
      }
      // Where this window is in the corpus: its input bytes, starting at a multiple of T.
      int64_t at = -1;
      for (int64_t k = 0; k < n && at < 0; ++k)
        if (corpus.compare(size_t(k * T), size_t(T), x) == 0) at = k * T;
      REQUIRE(at >= 0);
      CHECK(corpus.substr(size_t(at + 1), size_t(T)) == y);  // the next byte of every input
      CHECK(starts.insert(at).second);                       // no window twice
      if (d == &s.train) train_starts.push_back(at);
    }
  }
  CHECK(int64_t(starts.size()) == n);  // every window, in one of the two sets
  CHECK(std::is_sorted(train_starts.begin(), train_starts.end()));
  // The split is the seed's: the same seed gives the same, another a different one.
  CHECK(text_windows(corpus, T, 0.2, 11).val.x == s.val.x);
  CHECK(text_windows(corpus, T, 0.2, 12).val.x != s.val.x);
  // At least one window on each side.
  CHECK(text_windows(corpus, T, 1e-9, 1).val.n() == 1);
  CHECK(text_windows(corpus, T, 1 - 1e-9, 1).train.n() == 1);
  // Bytes are token ids 0..255, the high ones too.
  const TextSplit hi = text_windows(std::string(20, '\xff'), 4, 0.5, 0);
  CHECK(hi.train.x[0] == 255);
}

TEST_CASE("bad text input is a one-line error", "[sim][text]") {
  const fs::path dir = scratch("bad");
  write(dir / "empty.txt", "");
  write(dir / "nine.txt", "123456789");        // seq_len 8: one window only
  write(dir / "eight.txt", "12345678");        // fewer than seq_len + 1 bytes
  write(dir / "ok.txt", corpus_of(200));
  fs::create_directories(dir / "adir");
  {
    std::ofstream big(dir / "big.txt");  // over the bound: never read
    fs::resize_file(dir / "big.txt", uint64_t(kMaxTextBytes) + 1);
  }
  auto run = [&](const std::string& key) {
    return [&dir, key] { rows_of(parse_config(config(key), dir.string())); };
  };
  expect_error(run("text = \"missing.txt\""), "missing.txt");
  expect_error(run("text = \"empty.txt\""), "the corpus is empty");
  expect_error(run("text = \"eight.txt\""), "fewer than model.seq_len + 1 = 9");
  expect_error(run("text = \"nine.txt\""), "training and validation need two");
  expect_error(run("text = \"adir\""), "not a regular file");
  expect_error(run("text = \"big.txt\""), "larger than 16777216 bytes");
  expect_error(run("text = [\"ok.txt\", \"big.txt\"]"), "larger than 16777216 bytes");
  CHECK(rows_of(parse_config(config("text = [\"ok.txt\", \"nine.txt\"]"), dir.string())).size() == 5);
  auto parse = [&](const std::string& toml) { return [toml] { parse_config(toml, "."); }; };
  expect_error(parse(config("text = 3")), "'data.text' must be a file name or a list of them");
  expect_error(parse(config("text = [\"a\", 1]")), "must be a file name or a list of them");
  expect_error(parse(config("text = []")), "'data.text' must name 1..4096 files");
  expect_error(parse(config("text = \"a\"\nsynthetic = \"copy\"")), "exclude each other");
  expect_error(parse(config("text = \"a\"", "val_fraction = 1")), "(0, 1)");
  expect_error(parse(config("text = \"a\"", "val_fraction = 0")), "(0, 1)");
  expect_error(parse(config("text = \"a\"", "val_every = -1")), "val_every");
  expect_error(parse(config("text = \"a\"", "val_windows = -1")), "val_windows");
  std::string c = config("synthetic = \"copy\"", "val_every = 3");
  expect_error(parse(c), "need 'data.text'");
  c = config("text = \"a\"");
  expect_error(parse(c.replace(c.find("vocab = 256"), 11, "vocab = 255")), "model.vocab = 256");
  c = config("text = \"a\"");
  expect_error(parse(c.replace(c.find("causal = true"), 13, "causal = false")),
               "model.causal = true");
  fs::remove_all(dir);
}

TEST_CASE("the validation loss: where, what, and nothing else changes", "[sim][text]") {
  const fs::path dir = scratch("val");
  write(dir / "c.txt", corpus_of(600));
  // Rows at steps 0, 2, 4 (every 2) and the last; NaN elsewhere. Validation never changes the
  // training: fp8's delayed scaling state and the stochastic-rounding stream are its own.
  for (const std::string policy : {"fp32", "torch-cuda-fp16", "fp8-hybrid"}) {
    INFO(policy);
    TrainConfig c = parse_config(config("text = \"c.txt\"", "val_every = 2", "", policy), dir.string());
    c.steps = 6;
    if (policy == "torch-cuda-fp16") c.precision.rounding = Rounding::stochastic;
    const auto with = rows_of(c);
    c.val_every = 0;
    const auto without = rows_of(c);
    REQUIRE(with.size() == 6);
    for (size_t i = 0; i < with.size(); ++i) {
      CHECK(bits(with[i].loss) == bits(without[i].loss));
      CHECK(std::isnan(without[i].val_loss));
      CHECK(std::isnan(with[i].val_loss) == (i % 2 == 1 && i != 5));
    }
    c.val_every = 2;
    const auto two = rows_of(c, 2);  // the same bits on 2 threads
    for (size_t i = 0; i < with.size(); ++i) CHECK(bits(two[i].val_loss) == bits(with[i].val_loss));
  }
  // What it is: the mean cross-entropy of the held-out windows. Every window of a periodic
  // corpus is the same, so at step 0 (the same weights) one validation batch of 4 windows is
  // the training batch of 4 windows: the same loss, bit for bit.
  std::string periodic;
  while (periodic.size() < 8 * 20 + 1) periodic += "abcd";
  write(dir / "p.txt", periodic.substr(0, 8 * 20 + 1));  // 20 windows
  TrainConfig c = parse_config(config("text = \"p.txt\"", "val_fraction = 0.2\nval_every = 1"),
                               dir.string());
  auto rows = rows_of(c);
  CHECK(bits(rows[0].val_loss) == bits(rows[0].loss));
  CHECK(rows[1].val_loss < rows[0].val_loss);  // and it learns
  // val_windows cuts the set: 1 window of the 4 held out, the same mean (of 8 tokens, not 32).
  c.val_windows = 1;
  rows = rows_of(c);
  CHECK(rows[0].val_loss == Approx(rows[0].loss).epsilon(1e-12));
  // steps.csv: the new column last, empty on steps without a validation.
  c.val_every = 3;
  c.val_windows = 0;
  write_run(c, (dir / "out").string(), {});
  std::istringstream csv(slurp(dir / "out" / "steps.csv"));
  std::string line;
  std::getline(csv, line);
  const std::string tail = ",k_low,k_high,val_loss";
  CHECK(line.size() > tail.size());
  CHECK(line.compare(line.size() - tail.size(), tail.size(), tail) == 0);
  int step = 0;
  while (std::getline(csv, line)) {
    CHECK((line.back() == ',') == (step % 3 != 0 && step != 4));
    ++step;
  }
  CHECK(step == 5);
  fs::remove_all(dir);
}

TEST_CASE("tied embeddings: the head is the token embedding", "[sim][text]") {
  const fs::path dir = scratch("tied");
  write(dir / "c.txt", corpus_of(600));
  TrainConfig c = parse_config(config("text = \"c.txt\"", "", "tie_embeddings = true"), dir.string());
  c.steps = 20;
  Rng rng(c.seed);
  auto tied = make_transformer(c.transformer, rng);
  std::set<std::string> names;
  for (const Param& p : tied->params()) names.insert(p.name);
  CHECK(names.count("tok_emb.weight"));
  CHECK_FALSE(names.count("head.weight"));
  CHECK_FALSE(names.count("head.bias"));
  c.transformer.tie_embeddings = false;
  Rng rng2(c.seed);
  CHECK(make_transformer(c.transformer, rng2)->params().size() == tied->params().size() + 2);
  c.transformer.tie_embeddings = true;
  const auto rows = rows_of(c);
  CHECK(rows.back().loss < rows.front().loss);
  fs::remove_all(dir);
}
