// Reading prompt files: JSON Lines of {"prefix": ..., "query": ...}.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "prompt_file.h"

namespace tierkv::app {

std::vector<int32_t> PromptPair::Joined() const {
  std::vector<int32_t> t = prefix;
  t.insert(t.end(), query.begin(), query.end());
  return t;
}

namespace {

// A prompt file is text someone wrote or generated: larger is a mistake
// (or /dev/zero), and would be read into memory whole.
constexpr uintmax_t kMaxPromptFileBytes = 256ull << 20;

}  // namespace

Result<PromptPair> ParsePromptLine(const std::string& line, const std::string& where,
                                   const Tokenizer& tok) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message says what is wrong (syntax, ill-formed UTF-8, a
    // number out of range) and where. (Found by fuzz_prompt: a number
    // overflow is out_of_range, not parse_error.)
    return Status::InvalidArgument(where + ": not JSON: " + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  for (const char* field : {"prefix", "query"}) {
    if (!j.contains(field) || !j[field].is_string() || j[field].get<std::string>().empty()) {
      return Status::InvalidArgument(where + ": field '" + field +
                                     "' is missing or not a non-empty string");
    }
  }
  PromptPair p;
  ASSIGN_OR_RETURN(p.prefix, tok.Encode(j["prefix"].get<std::string>(), /*add_bos=*/true));
  ASSIGN_OR_RETURN(p.query, tok.Encode(j["query"].get<std::string>(), /*add_bos=*/false));
  if (p.query.empty()) return Status::InvalidArgument(where + ": 'query' has no tokens");
  return p;
}

Result<std::vector<PromptPair>> ReadPromptFile(const std::string& path, const Tokenizer& tok,
                                               size_t context) {
  // Checked before opening: opening a FIFO without a writer blocks.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return Status::NotFound("cannot read prompt file " + path);
  if (!std::filesystem::is_regular_file(st)) {
    return Status::InvalidArgument("prompt file " + path +
                                   " is not a regular file (a directory, FIFO or device)");
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxPromptFileBytes) {
    return Status::InvalidArgument("prompt file " + path + " has " + std::to_string(size) +
                                   " bytes, more than the " + std::to_string(kMaxPromptFileBytes) +
                                   " a prompt file may have");
  }
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read prompt file " + path);
  std::vector<PromptPair> out;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + " line " + std::to_string(no);
    ASSIGN_OR_RETURN(PromptPair p, ParsePromptLine(line, where, tok));
    const size_t n = p.prefix.size() + p.query.size();
    if (n > context) {
      return Status::InvalidArgument(where + ": 'prefix' and 'query' are " + std::to_string(n) +
                                     " tokens (" + std::to_string(p.prefix.size()) + " + " +
                                     std::to_string(p.query.size()) + "), more than the model's context of " +
                                     std::to_string(context));
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) return Status::InvalidArgument(path + ": no prompts");
  return out;
}

}  // namespace tierkv::app
