// The OpenAI-style request bodies the server accepts, parsed and checked.
// Every error is InvalidArgument naming the field ("max_tokens: must be an
// integer of at least 1"), or JSON's own complaint for a body that is not
// JSON. Unknown fields are ignored, as OpenAI-compatible servers do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/chat.h"
#include "tierkv/generate.h"
#include "tierkv/status.h"

namespace tierkv::server {

using tierkv::ChatMessage;

struct CompletionRequest {
  bool chat = false;
  std::string prompt;                    // completions: text
  std::vector<int32_t> prompt_tokens;    // completions: token ids instead of text
  std::vector<ChatMessage> messages;     // chat
  std::optional<int> max_tokens;         // unset: the endpoint's default
  SamplerOptions sampler;                // temperature 1 and top_p 1 unless given (OpenAI's)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  std::optional<double> retention;       // the request's share of prefix rows
  // Generate max_tokens tokens even past the model's end of text (llama.cpp's
  // and vLLM's extension; load generators use it for fixed output lengths).
  bool ignore_eos = false;
  // vLLM's field: splits the prefix cache's namespace further, so that only
  // requests with the same salt (and the same API key) share prefixes.
  std::string cache_salt;
};

// Parses a POST /v1/completions (chat = false) or /v1/chat/completions body.
Result<CompletionRequest> ParseCompletionRequest(std::string_view body, bool chat);

}  // namespace tierkv::server
