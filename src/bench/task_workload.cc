// Reading request files (tierkv/tools/task_workload.h, docs/workloads.md).
#include "tierkv/tools/task_workload.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tierkv::bench {

namespace {

using nlohmann::json;

// A request file is text someone wrote or generated: larger is a mistake
// (or /dev/zero), and would be read into memory whole.
constexpr uintmax_t kMaxFileBytes = 256ull << 20;
// More choices than any multiple-choice task has: each one is a request.
constexpr size_t kMaxChoices = 64;
// RULER's tasks ask for at most ten or so strings; an answer is a word, a
// number or a UUID.
constexpr size_t kMaxAnswers = 32, kMaxAnswerBytes = 256;
constexpr int kMaxAnswerTokens = 256;

Status BadField(const std::string& where, const std::string& field, const std::string& why) {
  return Status::InvalidArgument(where + ": field '" + field + "' " + why);
}

// j[field] as a non-empty string.
Result<std::string> NonEmptyString(const json& j, const char* field, const std::string& where) {
  if (!j.contains(field) || !j[field].is_string() || j[field].get<std::string>().empty()) {
    return BadField(where, field, "is missing or not a non-empty string");
  }
  return j[field].get<std::string>();
}

Status ParseChoices(const json& j, const std::string& where, const Tokenizer& tok, TaskRequest* r) {
  if (!j.contains("choices")) {
    if (j.contains("label")) return BadField(where, "label", "needs 'choices'");
    return Status::Ok();
  }
  const json& c = j["choices"];
  if (!c.is_array() || c.size() < 2 || c.size() > kMaxChoices) {
    return BadField(where, "choices", "must be an array of 2 to " + std::to_string(kMaxChoices) + " strings");
  }
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string field = "choices[" + std::to_string(i) + "]";
    if (!c[i].is_string() || c[i].get<std::string>().empty()) return BadField(where, field, "must be a non-empty string");
    ASSIGN_OR_RETURN(std::vector<int32_t> t, tok.Encode(c[i].get<std::string>(), /*add_bos=*/false));
    if (t.empty()) return BadField(where, field, "has no tokens");
    r->choices.push_back(std::move(t));
  }
  if (j.contains("label")) {
    const json& l = j["label"];
    if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= static_cast<int64_t>(c.size())) {
      return BadField(where, "label", "must be an index into 'choices' (0 to " + std::to_string(c.size() - 1) + ")");
    }
    r->label = static_cast<int>(l.get<int64_t>());
  }
  return Status::Ok();
}

// answers, max_tokens, length and depth (the generation tasks' fields).
Status ParseAnswers(const json& j, const std::string& where, TaskRequest* r) {
  if (!j.contains("answers")) {
    if (j.contains("max_tokens")) return BadField(where, "max_tokens", "needs 'answers'");
  } else {
    if (j.contains("choices")) return BadField(where, "answers", "and 'choices' exclude each other");
    const json& a = j["answers"];
    if (!a.is_array() || a.empty() || a.size() > kMaxAnswers) {
      return BadField(where, "answers", "must be an array of 1 to " + std::to_string(kMaxAnswers) + " strings");
    }
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string field = "answers[" + std::to_string(i) + "]";
      if (!a[i].is_string() || a[i].get<std::string>().size() > kMaxAnswerBytes ||
          a[i].get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos) {
        return BadField(where, field, "must be a string with a non-blank character, of at most " +
                                     std::to_string(kMaxAnswerBytes) + " bytes (a blank one is in every answer)");
      }
      r->answers.push_back(a[i].get<std::string>());
    }
    if (j.contains("max_tokens")) {
      const json& m = j["max_tokens"];
      if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > kMaxAnswerTokens) {
        return BadField(where, "max_tokens", "must be an integer from 1 to " + std::to_string(kMaxAnswerTokens));
      }
      r->max_tokens = static_cast<int>(m.get<int64_t>());
    }
  }
  if (j.contains("length")) {
    const json& l = j["length"];
    if (!l.is_number_integer() || l.get<int64_t>() < 1 || l.get<int64_t>() > (int64_t{1} << 24)) {
      return BadField(where, "length", "must be a positive integer (tokens)");
    }
    r->length = static_cast<int>(l.get<int64_t>());
  }
  if (j.contains("depth")) {
    const json& d = j["depth"];
    if (!d.is_number() || !(d.get<double>() >= 0 && d.get<double>() <= 1)) {
      return BadField(where, "depth", "must be a number from 0 to 1");
    }
    r->depth = d.get<double>();
  }
  return Status::Ok();
}

}  // namespace

std::string DepthLabel(double depth) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", depth);
  return buf;
}

std::vector<int32_t> TaskRequest::Joined() const {
  std::vector<int32_t> t = prefix;
  t.insert(t.end(), query.begin(), query.end());
  return t;
}

Status TaskWorkloadReader::AddLine(const std::string& line, const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    // nlohmann's message says what is wrong (syntax, ill-formed UTF-8, a
    // number out of range) and where; out_of_range is not a parse_error.
    return Status::InvalidArgument(where + ": not JSON: " + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  if (j.contains("document")) {
    ASSIGN_OR_RETURN(std::string id, NonEmptyString(j, "document", where));
    ASSIGN_OR_RETURN(std::string text, NonEmptyString(j, "text", where));
    if (documents_.count(id)) return BadField(where, "document", "'" + id + "' is defined twice");
    ASSIGN_OR_RETURN(documents_[id], tok_.Encode(text, /*add_bos=*/true));
    return Status::Ok();
  }
  TaskRequest r;
  if (j.contains("prefix") == j.contains("prefix_doc")) {
    return BadField(where, "prefix", "or 'prefix_doc' is required (exactly one of them)");
  }
  if (j.contains("prefix")) {
    ASSIGN_OR_RETURN(std::string prefix, NonEmptyString(j, "prefix", where));
    ASSIGN_OR_RETURN(r.prefix, tok_.Encode(prefix, /*add_bos=*/true));
  } else {
    ASSIGN_OR_RETURN(std::string id, NonEmptyString(j, "prefix_doc", where));
    auto it = documents_.find(id);
    if (it == documents_.end()) return BadField(where, "prefix_doc", "names '" + id + "', not a document defined on an earlier line");
    r.prefix = it->second;
  }
  ASSIGN_OR_RETURN(std::string query, NonEmptyString(j, "query", where));
  ASSIGN_OR_RETURN(r.query, tok_.Encode(query, /*add_bos=*/false));
  if (r.query.empty()) return BadField(where, "query", "has no tokens");
  for (const char* field : {"id", "task"}) {
    if (j.contains(field) && !j[field].is_string()) return BadField(where, field, "must be a string");
  }
  r.id = j.contains("id") ? j["id"].get<std::string>() : where;
  r.task = j.contains("task") ? j["task"].get<std::string>() : "";
  RETURN_IF_ERROR(ParseChoices(j, where, tok_, &r));
  RETURN_IF_ERROR(ParseAnswers(j, where, &r));
  requests_.push_back(std::move(r));
  return Status::Ok();
}

Result<std::vector<TaskRequest>> ReadTaskWorkload(const std::string& path, const Tokenizer& tok,
                                                  size_t context) {
  // Checked before opening: opening a FIFO without a writer blocks.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return Status::NotFound("cannot read request file " + path);
  if (!std::filesystem::is_regular_file(st)) {
    return Status::InvalidArgument("request file " + path + " is not a regular file (a directory, FIFO or device)");
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxFileBytes) {
    return Status::InvalidArgument("request file " + path + " has " + std::to_string(size) +
                                   " bytes, more than the " + std::to_string(kMaxFileBytes) + " allowed");
  }
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read request file " + path);
  TaskWorkloadReader reader(tok);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + " line " + std::to_string(no);
    const size_t before = reader.requests().size();
    RETURN_IF_ERROR(reader.AddLine(line, where));
    if (reader.requests().size() == before) continue;  // a document
    const TaskRequest& r = reader.requests().back();
    size_t longest = 0;
    for (const auto& c : r.choices) longest = std::max(longest, c.size());
    // A generation task's answer must fit too: its first token is
    // predicted by the query's last row, each later one takes a position.
    if (!r.answers.empty()) longest = static_cast<size_t>(r.max_tokens) - 1;
    const size_t n = r.prefix.size() + r.query.size() + longest;
    if (n > context) {
      return Status::InvalidArgument(where + ": 'prefix' and 'query'" + (longest ? std::string(r.answers.empty() ? " and the longest choice" : " and max_tokens - 1") : "") +
                                     " are " + std::to_string(n) + " tokens (" + std::to_string(r.prefix.size()) + " + " +
                                     std::to_string(r.query.size()) + (longest ? " + " + std::to_string(longest) : "") +
                                     "), more than the model's context of " + std::to_string(context));
    }
  }
  if (reader.requests().empty()) return Status::InvalidArgument(path + ": no requests");
  return std::move(reader.requests());
}

}  // namespace tierkv::bench
