// Generators behind MakeRulerSamples, one per family of subtasks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "eval/haystack.h"
#include "eval/sample.h"
#include "eval/text_codec.h"

namespace icecache::eval::ruler {

// Needles "The secret number for the <key> is <value>." in a haystack.
struct NiahSpec {
  std::string name;
  bool essay = false;  // essay haystack (else noise)
  bool uuid = false;   // values are UUIDs (else 7-digit numbers)
  int keys = 1;        // needles with distinct keys (the first is asked for)
  int values = 1;      // values of the asked key (multi-value)
  int queries = 1;     // keys asked for (multi-query; <= keys)
};

Result<Sample> MakeNiah(const TextCodec& codec, const NiahSpec& spec, Haystack& haystack,
                        int length, uint64_t seed);
Result<Sample> MakeVariableTracking(const TextCodec& codec, Haystack& noise, int length,
                                    uint64_t seed);
Result<Sample> MakeCommonWords(const TextCodec& codec, int length, uint64_t seed);
Result<Sample> MakeFrequentWords(const TextCodec& codec, int length, uint64_t seed);
Result<Sample> MakeQa(const TextCodec& codec, int length, uint64_t seed);

// Fails with a message naming the subtask when `room` tokens are too few for a document.
Status CheckRoom(const std::string& subtask, int length, int64_t room);

}  // namespace icecache::eval::ruler
