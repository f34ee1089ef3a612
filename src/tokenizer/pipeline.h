// The one Tokenizer implementation: added-token splitting, normalizer, pre-tokenizer, BPE model,
// post-processor ids and decoder, assembled by the GGUF and tokenizer.json loaders.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace icecache::tok {

struct PipelineSpec {
  std::shared_ptr<const Vocab> vocab;           // the model's vocabulary (BPE works over it)
  AddedVocab added;                             // Build() is called by MakePipelineTokenizer
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null: each split is one piece
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;  // may be null: tokens are joined with spaces
  // Ids the post-processor puts around the text when special tokens are added (add_bos).
  std::vector<int32_t> prefix_ids, suffix_ids;
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

// REQUIRES: spec.vocab and spec.model set.
std::unique_ptr<Tokenizer> MakePipelineTokenizer(PipelineSpec spec);

}  // namespace icecache::tok
