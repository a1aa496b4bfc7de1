// Number formatting shared by the report's tables.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace tierkv::bench {

// printf's rendering of one number (`f` is a format with one double).
inline std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A suite run's label in tables and plots: its workload, and its setting
// ("docqa retention=0.25").
inline std::string RunLabel(const nlohmann::json& run, const std::string& param) {
  std::string l = run["workload"].get<std::string>();
  if (!run["value"].is_null()) l += " " + param + "=" + run["value"].get<std::string>();
  return l;
}

}  // namespace tierkv::bench
