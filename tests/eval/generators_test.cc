// Task generators: equal seeds give equal samples, different seeds different ones, and prompts
// come within a few percent of the requested length in the model's own tokens.
#include <gtest/gtest.h>

#include <memory>

#include "eval/haystack.h"
#include "eval/needle_task.h"
#include "eval/prompt_fit.h"
#include "eval/ruler.h"
#include "eval/words.h"
#include "fake_codec.h"
#include "icecache/engine.h"
#include "testing/paths.h"

namespace icecache::eval {
namespace {

using testing::FakeCodec;

std::string Flatten(const std::vector<Sample>& samples) {
  std::string s;
  for (const Sample& x : samples) {
    s += x.subtask + "|" + x.id + "|" + x.prompt.before + x.prompt.document + x.prompt.after +
         x.prompt.answer_prefix + "|";
    for (const std::string& a : x.answers) s += a + ",";
  }
  return s;
}

Result<std::vector<Sample>> Ruler(const TextCodec& codec, uint64_t seed, int length,
                                  std::vector<std::string> subtasks = {}) {
  auto essay = Haystack::Filler(seed);
  auto noise = Haystack::Noise();
  RulerOptions o;
  o.seed = seed;
  o.samples = 2;
  o.subtasks = std::move(subtasks);
  o.essay = essay.get();
  o.noise = noise.get();
  return MakeRulerSamples(codec, o, length);
}

TEST(WordsTest, DeterministicAndDistinct) {
  EXPECT_EQ(PickDistinctWords(20, 7), PickDistinctWords(20, 7));
  EXPECT_NE(PickDistinctWords(20, 7), PickDistinctWords(20, 8));
  auto w = PickDistinctWords(static_cast<int>(CommonWords().size()), 3);
  std::sort(w.begin(), w.end());
  EXPECT_EQ(std::unique(w.begin(), w.end()), w.end());
  EXPECT_GE(CommonWords().size(), 300u);
  EXPECT_EQ(MakeDigits(5, 7).size(), 7u);
  EXPECT_EQ(MakeUuid(5).size(), 36u);
  EXPECT_EQ(MakeVariableName(5, 5), MakeVariableName(5, 5));
}

TEST(HaystackTest, InsertAtDepthsKeepsTextAndOrder) {
  const std::string text = "One two. Three four. Five six. Seven eight.";
  const std::string out = InsertAtDepths(text, {{1.0, "LAST."}, {0.0, "FIRST."}, {0.5, "MID."}});
  EXPECT_EQ(out.find("FIRST."), 0u);
  EXPECT_LT(out.find("MID."), out.find("LAST."));
  EXPECT_EQ(out.substr(out.size() - 5), "LAST.");
  EXPECT_NE(out.find("Five six. Seven eight."), std::string::npos);
  // Every original sentence is still whole.
  for (const char* s : {"One two.", "Three four.", "Five six.", "Seven eight."}) {
    EXPECT_NE(out.find(s), std::string::npos) << s;
  }
}

TEST(GeneratorsTest, NeedleDeterministicForSeed) {
  FakeCodec codec;
  NeedleTaskOptions o;
  o.samples = 3;
  o.seed = 11;
  auto hay1 = Haystack::Filler(11);
  auto hay2 = Haystack::Filler(11);
  auto a = MakeNeedleSamples(codec, *hay1, 2048, o);
  auto b = MakeNeedleSamples(codec, *hay2, 2048, o);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(Flatten(*a), Flatten(*b));
  ASSERT_EQ(a->size(), 3u);
  EXPECT_DOUBLE_EQ((*a)[1].depth, 0.5);
  for (const Sample& s : *a) {
    EXPECT_NE(s.prompt.document.find(s.answers[0]), std::string::npos);
  }
  o.seed = 12;
  auto c = MakeNeedleSamples(codec, *hay1, 2048, o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(Flatten(*a), Flatten(*c));
}

TEST(GeneratorsTest, RulerDeterministicForSeed) {
  FakeCodec codec;
  auto a = Ruler(codec, 5, 2048);
  auto b = Ruler(codec, 5, 2048);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->size(), 2 * RulerSubtasks().size());
  EXPECT_EQ(Flatten(*a), Flatten(*b));
  auto c = Ruler(codec, 6, 2048);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(Flatten(*a), Flatten(*c));
  // A subset gives the same samples as in the full run.
  auto only = Ruler(codec, 5, 2048, {"vt"});
  ASSERT_TRUE(only.ok());
  std::vector<Sample> vt;
  for (const Sample& s : *a) {
    if (s.subtask == "vt") vt.push_back(s);
  }
  EXPECT_EQ(Flatten(*only), Flatten(vt));
}

TEST(GeneratorsTest, RulerAnswersAreInTheDocument) {
  FakeCodec codec;
  auto samples = Ruler(codec, 9, 4096);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  for (const Sample& s : *samples) {
    for (const std::string& a : s.answers) {
      EXPECT_NE(s.prompt.document.find(a), std::string::npos) << s.subtask << " " << a;
    }
  }
}

TEST(GeneratorsTest, UnknownSubtaskAndTooShortLengthFail) {
  FakeCodec codec;
  auto bad = Ruler(codec, 1, 2048, {"niah_nope"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("niah_nope"), std::string::npos);
  auto tiny = Ruler(codec, 1, 64, {"cwe"});
  EXPECT_FALSE(tiny.ok());
}

// Real tokenizer: lengths within a few percent of the request.
class TokenLengthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (icecache::testing::DefaultModelPath().empty()) return;
    EngineOptions options;
    options.model = icecache::testing::DefaultModelPath();
    options.threads = 1;
    options.context_size = 512;
    auto e = Engine::Create(options);
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(*e);
    codec_ = MakeEngineCodec(*engine_);
  }
  static void TearDownTestSuite() {
    codec_.reset();
    engine_.reset();
  }
  void SetUp() override {
    if (!engine_) GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
  }
  // Prompt plus answer budget must land in [97%, 100%] of the length.
  static void ExpectFits(const std::vector<Sample>& samples, int length) {
    for (const Sample& s : samples) {
      auto fitted = FitPrompt(*codec_, s.prompt, length - s.max_new_tokens);
      ASSERT_TRUE(fitted.ok()) << fitted.status().message();
      const int64_t used = static_cast<int64_t>(fitted->tokens.size()) + s.max_new_tokens;
      EXPECT_LE(used, length) << s.subtask << " " << s.id;
      EXPECT_GE(used, 0.97 * length) << s.subtask << " " << s.id;
      EXPECT_EQ(fitted->cut_tokens, 0) << s.subtask << " " << s.id;
    }
  }
  static std::unique_ptr<Engine> engine_;
  static std::unique_ptr<TextCodec> codec_;
};
std::unique_ptr<Engine> TokenLengthTest::engine_;
std::unique_ptr<TextCodec> TokenLengthTest::codec_;

TEST_F(TokenLengthTest, NeedleAtSeveralLengths) {
  auto hay = Haystack::Filler(0);
  NeedleTaskOptions o;
  o.samples = 3;
  for (int length : {1024, 4096, 16384}) {
    auto s = MakeNeedleSamples(*codec_, *hay, length, o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ExpectFits(*s, length);
  }
}

TEST_F(TokenLengthTest, EssayHaystack) {
  const std::string dir = icecache::testing::SourceDir() + "/../shared/data/haystack/pg_essays";
  auto hay = Haystack::FromDirectory(dir);
  if (!hay.ok()) GTEST_SKIP() << "no essays at " << dir;
  NeedleTaskOptions o;
  o.samples = 2;
  auto s = MakeNeedleSamples(*codec_, **hay, 8192, o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectFits(*s, 8192);
}

TEST_F(TokenLengthTest, EveryRulerSubtask) {
  for (int length : {1024, 4096}) {
    auto s = Ruler(*codec_, 3, length);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ExpectFits(*s, length);
  }
}

TEST_F(TokenLengthTest, LongRulerSamples) {
  auto s = Ruler(*codec_, 4, 32768, {"niah_multikey", "cwe", "fwe", "qa"});
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectFits(*s, 32768);
}

TEST_F(TokenLengthTest, FitPromptCutsTheMiddle) {
  PromptParts p;
  p.before = "Read this:\n";
  p.after = "\nWhat is the first word?";
  for (int i = 0; i < 400; ++i) p.document += "Sentence number " + std::to_string(i) + ". ";
  auto f = FitPrompt(*codec_, p, 300);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_LE(f->tokens.size(), 300u);
  EXPECT_GE(f->tokens.size(), 290u);
  EXPECT_GT(f->cut_tokens, 0);
  const std::string text = codec_->Decode(f->tokens);
  EXPECT_NE(text.find("Sentence number 0."), std::string::npos);
  EXPECT_NE(text.find("Sentence number 399."), std::string::npos);
  EXPECT_EQ(text.find("Sentence number 200."), std::string::npos);
  EXPECT_FALSE(FitPrompt(*codec_, p, 5).ok());
}

}  // namespace
}  // namespace icecache::eval
