// OpenAI's response shapes: a whole completion, the chunks of a streamed
// one (server-sent events), and the error object. Text that is not valid
// UTF-8 (a token that ends mid-character) is written with U+FFFD.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sched/job.h"
#include "tierkv/status.h"

namespace tierkv::server {

// What every response of one request shares.
struct ResponseHead {
  std::string id;      // "cmpl-…" or "chatcmpl-…"
  int64_t created = 0; // Unix seconds
  std::string model;
  bool chat = false;
};

struct Usage {
  size_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};
Usage UsageOf(const sched::Outcome& o, size_t prompt_tokens);

// The non-streamed body.
std::string CompletionBody(const ResponseHead& h, const sched::Outcome& o, const Usage& u);
// One SSE event ("data: {...}\n\n"): a text delta (chat: the first carries
// the role), or the last with finish_reason set.
std::string ChunkEvent(const ResponseHead& h, const std::string& text, bool first,
                       const char* finish_reason);
// The usage event (stream_options.include_usage): empty choices.
std::string UsageEvent(const ResponseHead& h, const Usage& u);
inline constexpr const char* kDoneEvent = "data: [DONE]\n\n";

// {"error": {"message", "type", "param", "code"}}; param is the field an
// InvalidArgument message names first ("max_tokens: …").
std::string ErrorBody(int http_status, const Status& s);
// The HTTP status for a Status from parsing, the engine or the scheduler.
int HttpStatusOf(const Status& s);

}  // namespace tierkv::server
