// libFuzzer target: the server's request bodies. The first byte picks the
// endpoint (completions or chat); the rest is the body. A refusal must come
// as InvalidArgument with an OpenAI error body that is valid JSON; a chat
// body that parses is rendered with the chat format bits 1-2 pick and the
// default model's tokenizer.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "default_model.h"
#include "server/api.h"
#include "tierkv/chat.h"
#include "server/openai_format.h"

namespace {
tierkv::fuzz::DefaultModel loaded;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  loaded = tierkv::fuzz::LoadDefaultModel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto r = tierkv::server::ParseCompletionRequest(body, chat);
  if (!r.ok()) {
    if (r.status().code() != tierkv::StatusCode::kInvalidArgument) __builtin_trap();
    const std::string e = tierkv::server::ErrorBody(400, r.status());
    if (!nlohmann::json::accept(e)) __builtin_trap();
    return 0;
  }
  if (chat) {
    tierkv::ChatTemplate t;
    t.format = static_cast<tierkv::ChatFormat>((data[0] >> 1) & 3);
    t.date = "26 Jul 2024";
    tierkv::ChatPromptTokens(*loaded.tokenizer, t, r->messages).status().IgnoreError();
  }
  return 0;
}
