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

// `s` as a gnuplot single-quoted string: a quote inside is doubled, so a
// title or path holding an apostrophe (a workload file named "Bob's") does
// not end the string early and fail the plot.
inline std::string GpQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A suite run's label in tables and plots: its workload, and its setting
// ("docqa retention=0.25").
inline std::string RunLabel(const nlohmann::json& run, const std::string& param) {
  std::string l = run["workload"].get<std::string>();
  if (!run["value"].is_null()) l += " " + param + "=" + run["value"].get<std::string>();
  return l;
}

}  // namespace tierkv::bench
