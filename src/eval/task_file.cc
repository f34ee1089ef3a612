#include "eval/task_file.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eval/answer_extract.h"

namespace icecache::eval {

namespace {

using Json = nlohmann::json;

Status LineError(const std::string& path, int line, const std::string& what) {
  return InvalidArgument(fmt::format("{}:{}: {}", path, line, what));
}

// A string or a list of strings (answers may be either).
Result<std::vector<std::string>> Strings(const Json& j, const char* field, const std::string& path,
                                         int line) {
  std::vector<std::string> out;
  if (j.is_string()) {
    out.push_back(j.get<std::string>());
  } else if (j.is_array()) {
    for (const Json& item : j) {
      if (item.is_string()) {
        out.push_back(item.get<std::string>());
      } else if (item.is_number()) {
        out.push_back(item.dump());
      } else {
        return LineError(path, line, fmt::format("field '{}' must hold strings", field));
      }
    }
  } else if (j.is_number()) {
    out.push_back(j.dump());
  } else {
    return LineError(path, line,
                     fmt::format("field '{}' must be a string or a list of strings", field));
  }
  return out;
}

Result<std::string> RequireString(const Json& obj, const char* field, const std::string& path,
                                  int line) {
  auto it = obj.find(field);
  if (it == obj.end()) return LineError(path, line, fmt::format("missing field '{}'", field));
  if (!it->is_string()) {
    return LineError(path, line, fmt::format("field '{}' must be a string", field));
  }
  return it->get<std::string>();
}

Result<TaskDocument> ParseLeval(const Json& obj, const std::string& path, int line) {
  TaskDocument d;
  d.line = line;
  ICECACHE_ASSIGN_OR_RETURN(d.document, RequireString(obj, "input", path, line));
  for (const char* f : {"instructions", "outputs"}) {
    if (!obj.contains(f)) return LineError(path, line, fmt::format("missing field '{}'", f));
  }
  ICECACHE_ASSIGN_OR_RETURN(std::vector<std::string> questions,
                            Strings(obj["instructions"], "instructions", path, line));
  ICECACHE_ASSIGN_OR_RETURN(std::vector<std::string> outputs,
                            Strings(obj["outputs"], "outputs", path, line));
  if (questions.size() != outputs.size()) {
    return LineError(path, line,
                     fmt::format("'instructions' has {} items but 'outputs' has {}",
                                 questions.size(), outputs.size()));
  }
  for (size_t i = 0; i < questions.size(); ++i) {
    if (outputs[i].find_first_not_of(" \t\r\n") == std::string::npos) {
      return LineError(path, line, fmt::format("output {} is empty", i + 1));
    }
    d.questions.push_back({questions[i], {outputs[i]}});
  }
  if (auto it = obj.find("evaluation"); it != obj.end() && it->is_string()) {
    d.evaluation = it->get<std::string>();
  }
  return d;
}

Result<TaskDocument> ParsePlain(const Json& obj, const std::string& path, int line) {
  TaskDocument d;
  d.line = line;
  ICECACHE_ASSIGN_OR_RETURN(d.document, RequireString(obj, "context", path, line));
  TaskQuestion q;
  ICECACHE_ASSIGN_OR_RETURN(q.question, RequireString(obj, "question", path, line));
  if (!obj.contains("answers")) return LineError(path, line, "missing field 'answers'");
  ICECACHE_ASSIGN_OR_RETURN(q.answers, Strings(obj["answers"], "answers", path, line));
  std::erase_if(q.answers, [](const std::string& a) {
    return a.find_first_not_of(" \t\r\n") == std::string::npos;
  });
  if (q.answers.empty()) return LineError(path, line, "no expected answer in 'answers'");
  d.questions.push_back(std::move(q));
  if (auto it = obj.find("id"); it != obj.end()) {
    d.id = it->is_string() ? it->get<std::string>() : it->dump();
  }
  return d;
}

}  // namespace

Result<TaskFile> LoadTaskFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open task file");
  TaskFile file;
  file.path = path;
  file.stem = std::filesystem::path(path).stem().string();
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json obj = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return LineError(path, line, "malformed JSON");
    if (!obj.is_object()) return LineError(path, line, "expected a JSON object");
    Result<TaskDocument> doc = InvalidArgument("");
    if (obj.contains("input") || obj.contains("instructions")) {
      doc = ParseLeval(obj, path, line);
    } else if (obj.contains("context") || obj.contains("question")) {
      doc = ParsePlain(obj, path, line);
    } else {
      return LineError(path, line,
                       "expected an L-Eval line {\"input\", \"instructions\", \"outputs\"} or "
                       "{\"context\", \"question\", \"answers\"}");
    }
    if (!doc.ok()) return doc.status();
    if (doc->id.empty()) doc->id = "line" + std::to_string(line);
    file.documents.push_back(std::move(*doc));
  }
  if (in.bad()) return IoError(path + ": read error");
  if (file.documents.empty()) return InvalidArgument(path + ": no samples in the file");
  return file;
}

ScoreKind ChooseScoreKind(const TaskFile& file) {
  const std::string& s = file.stem;
  if (s.starts_with("quality") || s.starts_with("tpo") || s.starts_with("coursera")) {
    return ScoreKind::kOption;
  }
  if (s.starts_with("topic_retrieval")) return ScoreKind::kTopic;
  if (s.starts_with("gsm")) return ScoreKind::kNumber;
  const std::string& ev = file.documents.front().evaluation;
  if (ev == "rouge" || ev == "f1" || ev == "LLM") return ScoreKind::kF1;
  bool all_options = true, all_numbers = true;
  for (const TaskDocument& d : file.documents) {
    for (const TaskQuestion& q : d.questions) {
      for (const std::string& a : q.answers) {
        all_options = all_options && ParseExpectedOption(a).has_value();
        all_numbers = all_numbers && ParseNumber(a).has_value();
      }
    }
  }
  if (all_options) return ScoreKind::kOption;
  if (all_numbers) return ScoreKind::kNumber;
  return ScoreKind::kContains;
}

int DefaultMaxNewTokens(ScoreKind kind) {
  switch (kind) {
    case ScoreKind::kOption:
    case ScoreKind::kTopic:
    case ScoreKind::kExact:
      return 32;
    case ScoreKind::kContains:
    case ScoreKind::kContainsAll:
      return 64;
    case ScoreKind::kNumber:
    case ScoreKind::kF1:
      return 256;
  }
  return 64;
}

std::vector<Sample> MakeTaskSamples(const TaskFile& file, ScoreKind kind, int max_new_tokens,
                                    int limit) {
  std::vector<Sample> out;
  for (const TaskDocument& d : file.documents) {
    for (size_t k = 0; k < d.questions.size(); ++k) {
      if (limit > 0 && static_cast<int>(out.size()) >= limit) return out;
      const TaskQuestion& q = d.questions[k];
      Sample s;
      s.subtask = file.stem;
      s.id = d.questions.size() > 1 ? fmt::format("{}q{}", d.id, k + 1) : d.id;
      s.prompt.before =
          "Below is a long document. Read it, then follow the instruction after it.\n\n"
          "<document>\n";
      s.prompt.document = d.document;
      s.prompt.after = "\n</document>\n\n" + q.question;
      s.answers = q.answers;
      s.score_kind = kind;
      s.max_new_tokens = max_new_tokens > 0 ? max_new_tokens : DefaultMaxNewTokens(kind);
      if (kind == ScoreKind::kOption) {
        s.choices = ParseOptions(q.question);
        s.prompt.after += "\n\nAnswer with the letter of the correct option only.";
      } else if (kind == ScoreKind::kTopic) {
        for (const TaskQuestion& other : d.questions) {
          if (&other != &q)
            s.choices.insert(s.choices.end(), other.answers.begin(), other.answers.end());
        }
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace icecache::eval
