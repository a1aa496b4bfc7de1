// The report's llama.cpp section (the rest is in tierkv/tools/bench_suite.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tierkv::bench {

// A Markdown section comparing suite["llamacpp"] with the systems
// experiment's runs on the same workloads ("" when there is none).
std::string LlamaCppSection(const nlohmann::json& suite);

}  // namespace tierkv::bench
