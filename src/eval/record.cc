#include "eval/record.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace icecache::eval {

using Json = nlohmann::json;

std::string RecordKey(const std::string& task, const std::string& subtask, const std::string& id,
                      const std::string& policy, int budget, int length, double depth,
                      uint64_t seed, const std::string& model, const std::string& variant) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{:.4f}|{}|{}|{}", task, subtask, id, policy, budget, length,
                     depth, seed, model, variant);
}

std::string EvalRecord::Key() const {
  return RecordKey(task, subtask, id, policy, budget, length, depth, seed, model, variant);
}

std::string RecordToJson(const EvalRecord& r) {
  Json j;
  j["task"] = r.task;
  j["subtask"] = r.subtask;
  j["id"] = r.id;
  j["policy"] = r.policy;
  j["budget"] = r.budget;
  j["length"] = r.length;
  j["depth"] = r.depth;
  j["seed"] = r.seed;
  j["model"] = r.model;
  j["variant"] = r.variant;
  j["score"] = r.score;
  j["reply"] = r.reply;
  j["extracted"] = r.extracted;
  j["answers"] = r.answers;
  j["scorer"] = r.scorer;
  j["prompt_tokens"] = r.prompt_tokens;
  j["cut_tokens"] = r.cut_tokens;
  j["generated_tokens"] = r.generated_tokens;
  j["extrapolated"] = r.extrapolated;
  j["metrics"] = r.metrics;
  // Replies may hold invalid UTF-8 (a token cut inside a character): replace, never throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<EvalRecord> RecordFromJson(const std::string& line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("malformed JSON");
  EvalRecord r;
  try {
    r.task = j.at("task").get<std::string>();
    r.subtask = j.at("subtask").get<std::string>();
    r.id = j.at("id").get<std::string>();
    r.policy = j.at("policy").get<std::string>();
    r.budget = j.at("budget").get<int>();
    r.length = j.at("length").get<int>();
    r.depth = j.at("depth").get<double>();
    r.seed = j.at("seed").get<uint64_t>();
    r.model = j.at("model").get<std::string>();
    r.variant = j.value("variant", "");
    r.score = j.at("score").get<double>();
    r.reply = j.value("reply", "");
    r.extracted = j.value("extracted", "");
    r.answers = j.value("answers", std::vector<std::string>{});
    r.scorer = j.value("scorer", "");
    r.prompt_tokens = j.value("prompt_tokens", int64_t{0});
    r.cut_tokens = j.value("cut_tokens", int64_t{0});
    r.generated_tokens = j.value("generated_tokens", int64_t{0});
    r.extrapolated = j.value("extrapolated", false);
    if (auto it = j.find("metrics"); it != j.end() && it->is_object()) {
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (m.value().is_number()) r.metrics[m.key()] = m.value().get<double>();
      }
    }
  } catch (const Json::exception& e) {
    return Corrupt(std::string("bad record: ") + e.what());
  }
  return r;
}

}  // namespace icecache::eval
