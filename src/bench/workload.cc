// ReadWorkload: bench-serve's JSON Lines sessions (tierkv/tools/serve_bench.h).
#include <fstream>
#include <nlohmann/json.hpp>

#include "tierkv/tools/serve_bench.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;

Status Bad(const std::string& where, const std::string& field, const std::string& why) {
  return Status::InvalidArgument(where + ": " + field + ": " + why);
}

Result<Session> ParseSession(const std::string& line, const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(where + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) return Status::InvalidArgument(where + ": must be a JSON object");
  Session s;
  const bool has_system = j.contains("system"), has_prefix = j.contains("prefix");
  if (has_system == has_prefix) return Bad(where, "system", "exactly one of \"system\" (a chat) or \"prefix\" (completions)");
  const char* key = has_system ? "system" : "prefix";
  if (!j[key].is_string()) return Bad(where, key, "must be a string");
  s.chat = has_system;
  (s.chat ? s.system : s.prefix) = j[key].get<std::string>();
  if (!j.contains("turns") || !j["turns"].is_array() || j["turns"].empty()) {
    return Bad(where, "turns", "required: a non-empty array of strings");
  }
  for (size_t i = 0; i < j["turns"].size(); ++i) {
    const json& t = j["turns"][i];
    if (!t.is_string() || t.get<std::string>().empty()) {
      return Bad(where, "turns[" + std::to_string(i) + "]", "must be a non-empty string");
    }
    s.turns.push_back(t.get<std::string>());
  }
  if (j.contains("max_tokens")) {
    const json& m = j["max_tokens"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > 1 << 20) {
      return Bad(where, "max_tokens", "must be an integer in [1, 1048576], got " + m.dump());
    }
    s.max_tokens = static_cast<int>(m.get<int64_t>());
  }
  return s;
}

}  // namespace

Result<std::vector<Session>> ReadWorkload(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(path + ": cannot open the workload file");
  std::vector<Session> sessions;
  std::string line;
  for (size_t n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ASSIGN_OR_RETURN(Session s, ParseSession(line, path + " line " + std::to_string(n)));
    sessions.push_back(std::move(s));
  }
  if (f.bad()) return Status::IOError(path + ": read failed");
  if (sessions.empty()) return Status::InvalidArgument(path + ": no sessions (one JSON object per line)");
  return sessions;
}

}  // namespace tierkv::bench
