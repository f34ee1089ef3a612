// Builders of normalizers, pre-tokenizers and decoders from their tokenizer.json objects. Every
// error is a Status naming the component path ("pre_tokenizer.pretokenizers[1]") and the
// problem; unknown component types are Unsupported and named.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "icecache/status.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"

namespace icecache::tok {

// A null or absent component yields nullptr.
Result<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j,
                                                    const std::string& where);
Result<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j,
                                                        const std::string& where);
Result<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j, const std::string& where);

// {"String": "..."} or {"Regex": "..."}.
Result<std::shared_ptr<const Regex>> ParsePattern(const nlohmann::json& j,
                                                  const std::string& where);

// Typed field access that reports the path instead of throwing.
Result<std::string> GetString(const nlohmann::json& obj, const char* key, const std::string& where);
Result<bool> GetBool(const nlohmann::json& obj, const char* key, bool def,
                     const std::string& where);
// The "type" of a component object.
Result<std::string> ComponentType(const nlohmann::json& j, const std::string& where);

}  // namespace icecache::tok
