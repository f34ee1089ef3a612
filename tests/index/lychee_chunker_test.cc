// lychee boundary-aware chunking on real token text (the committed tiny byte-level BPE tokenizer,
// and SmolLM2's when the default model is present): chunks end where lines, sentences,
// statements and clauses end, respect the hard maximum, and do not depend on how the token
// stream arrives.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "index/lychee/chunker.h"
#include "model/gguf/gguf_file.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace icecache::lychee {
namespace {

std::unique_ptr<Tokenizer> TinyTokenizer() {
  const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
  const std::string path = testing::TinyTokenizerPath(spec);
  auto t = Tokenizer::FromHfFiles(path, testing::TokenizerConfigPathFor(path));
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Cuts as many chunks as the tokens decide; returns their lengths.
std::vector<int> Cut(std::span<const int32_t> ids, BoundaryClassifier& c, const ChunkLengths& l) {
  std::vector<int> lens;
  size_t at = 0;
  while (true) {
    const int n = NextCut(ids.subspan(at), c, l);
    if (n == 0) break;
    lens.push_back(n);
    at += n;
  }
  return lens;
}

class ChunkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = TinyTokenizer();
    ASSERT_NE(tok_, nullptr);
  }
  // Token ids of `text` repeated until there are at least `n`.
  std::vector<int32_t> Ids(const std::string& text, size_t n) const {
    std::vector<int32_t> ids;
    while (ids.size() < n) {
      const std::vector<int32_t> t = tok_->Encode(text, false, false);
      ids.insert(ids.end(), t.begin(), t.end());
    }
    return ids;
  }
  // The decoded text of each chunk.
  std::vector<std::string> Chunks(const std::vector<int32_t>& ids, const ChunkLengths& l) {
    BoundaryClassifier c(tok_.get());
    std::vector<std::string> out;
    size_t at = 0;
    for (int n : Cut(ids, c, l)) {
      EXPECT_GE(n, l.min_len);
      EXPECT_LE(n, l.max_len);
      out.push_back(tok_->Decode(std::span<const int32_t>(ids).subspan(at, n)));
      at += n;
    }
    return out;
  }
  std::unique_ptr<Tokenizer> tok_;
};

bool EndsWithAny(const std::string& s, const std::string& chars) {
  std::string t = s;
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return !t.empty() && chars.find(t.back()) != std::string::npos;
}

TEST_F(ChunkerTest, LengthsFollowThePageSize) {
  for (int p : {4, 8, 16, 32, 64}) {
    const ChunkLengths l = ChunkLengthsFor(p);
    EXPECT_GE(2 * l.min_len, p) << "chunks must fill at least half a page";
    EXPECT_LE(l.min_len, l.target_len);
    EXPECT_LT(l.target_len, l.max_len);
  }
  EXPECT_EQ(ChunkLengthsFor(16).min_len, 8);
  EXPECT_EQ(ChunkLengthsFor(16).target_len, 16);
  EXPECT_EQ(ChunkLengthsFor(16).max_len, 24);
}

TEST_F(ChunkerTest, ProseIsCutAtSentenceEnds) {
  const std::string text =
      "The cat sat on the mat. It was a sunny day in May. Birds sang in the old oak tree. ";
  const std::vector<int32_t> ids = Ids(text, 400);
  const std::vector<std::string> chunks = Chunks(ids, ChunkLengthsFor(16));
  ASSERT_GT(chunks.size(), 10u);
  int sentence_ends = 0;
  for (const std::string& c : chunks) sentence_ends += EndsWithAny(c, ".");
  // Every sentence is 8-16 tokens here, so every cut is at a full stop.
  EXPECT_EQ(sentence_ends, static_cast<int>(chunks.size()));
}

TEST_F(ChunkerTest, LinesAreCutAtNewlines) {
  const std::string text = "first line of the list\nsecond line goes here\nthird one is short\n";
  const std::vector<int32_t> ids = Ids(text, 400);
  const std::vector<std::string> chunks = Chunks(ids, ChunkLengthsFor(16));
  ASSERT_GT(chunks.size(), 10u);
  for (const std::string& c : chunks) {
    EXPECT_EQ(c.back(), '\n') << "chunk '" << c << "'";
  }
}

TEST_F(ChunkerTest, CodeIsCutAtStatementsAndBlocks) {
  const std::string text =
      "int add(int a, int b) {\n  int s = a + b;\n  return s;\n}\n"
      "for (int i = 0; i < n; ++i) { total += v[i]; }\n";
  const std::vector<int32_t> ids = Ids(text, 600);
  const std::vector<std::string> chunks = Chunks(ids, ChunkLengthsFor(16));
  ASSERT_GT(chunks.size(), 10u);
  for (const std::string& c : chunks) {
    const char last = c.back();
    EXPECT_TRUE(last == '\n' || last == ';' || last == '{' || last == '}') << "chunk '" << c << "'";
  }
}

TEST_F(ChunkerTest, ClausesAreCutAtCommasWhenNoSentenceEnds) {
  const std::string text = "apples and pears and plums, grapes or melons or figs, ";
  const std::vector<int32_t> ids = Ids(text, 400);
  const std::vector<std::string> chunks = Chunks(ids, ChunkLengthsFor(16));
  ASSERT_GT(chunks.size(), 10u);
  for (const std::string& c : chunks) EXPECT_TRUE(EndsWithAny(c, ",")) << "chunk '" << c << "'";
}

TEST_F(ChunkerTest, TextWithoutBoundariesHitsTheHardMaximumNeverMore) {
  // One endless word: no spaces, punctuation or newlines.
  const std::vector<int32_t> ids = Ids("abcdefghijklmnopqrstuvwxyz0123456789", 500);
  const ChunkLengths l = ChunkLengthsFor(16);
  BoundaryClassifier c(tok_.get());
  const std::vector<int> lens = Cut(ids, c, l);
  ASSERT_GT(lens.size(), 10u);
  for (int n : lens) EXPECT_EQ(n, l.target_len);
  // Only word starts beyond the target: the cut takes the first of them, within the maximum.
  std::string words;
  for (int i = 0; i < 40; ++i) words += "abcdefghijklmnopqrstuvwxyz0123456789 ";
  const std::vector<int32_t> w = Ids(words, 500);
  for (int n : Cut(w, c, l)) {
    EXPECT_GE(n, l.min_len);
    EXPECT_LE(n, l.max_len);
  }
}

TEST_F(ChunkerTest, CutsDoNotDependOnHowTokensArrive) {
  const std::string text =
      "A line.\nAnother, longer line with words; and more words.\n{ code(); }\nend\n";
  const std::vector<int32_t> ids = Ids(text, 700);
  const ChunkLengths l = ChunkLengthsFor(16);
  BoundaryClassifier c(tok_.get());
  const std::vector<int> all = Cut(ids, c, l);
  // One token at a time, as decode steps deliver them: a cut is made as soon as it is decided.
  std::vector<int> streamed;
  size_t start = 0;
  for (size_t n = 1; n <= ids.size(); ++n) {
    const int cut = NextCut(std::span<const int32_t>(ids).subspan(start, n - start), c, l);
    if (cut > 0) {
      streamed.push_back(cut);
      start += cut;
    }
  }
  EXPECT_EQ(streamed, all);
}

TEST_F(ChunkerTest, NoTokenizerGivesFixedChunks) {
  BoundaryClassifier c(nullptr);
  std::vector<int32_t> ids(200, 5);
  for (int n : Cut(ids, c, ChunkLengthsFor(16))) EXPECT_EQ(n, 16);
}

TEST(ChunkerSmolLm2Test, RealTokenizerCutsAtBoundaries) {
  const std::string path = testing::DefaultModelPath();
  if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found";
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok());
  const std::string text =
      "Attention reads pages. A page holds up to sixteen tokens of one head.\n"
      "def area(r):\n    return 3.14159 * r * r\n\n"
      "The index, which is small, sits beside the pages; it never owns them.\n";
  std::vector<int32_t> ids;
  while (ids.size() < 600) {
    const std::vector<int32_t> t = (*tok)->Encode(text, false, false);
    ids.insert(ids.end(), t.begin(), t.end());
  }
  BoundaryClassifier c(tok->get());
  const ChunkLengths l = ChunkLengthsFor(16);
  size_t at = 0;
  int chunks = 0, at_boundary = 0;
  for (int n : Cut(ids, c, l)) {
    ASSERT_GE(n, l.min_len);
    ASSERT_LE(n, l.max_len);
    at_boundary += c.CutLevel(ids[at + n - 1], ids[at + n]) >= kClauseBoundary;
    ++chunks;
    at += n;
  }
  ASSERT_GT(chunks, 20);
  // Lines and sentences here are short enough that nearly every cut ends a unit of text.
  EXPECT_GE(at_boundary, chunks * 9 / 10);
}

}  // namespace
}  // namespace icecache::lychee
