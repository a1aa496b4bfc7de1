// The chat template: messages to prompt tokens. Each message is rendered
// as text and tokenized on its own, then the pieces are joined after BOS,
// so the prompt of a conversation's next turn begins with exactly the
// tokens of this turn's prompt: the system message and every earlier turn
// are a prefix the store reuses, and only the newest turn is computed.
//
//   system     "{content}\n\n"
//   user       "User: {content}\n"
//   assistant  "Assistant:" then " {content}\n" (two pieces, so that the
//              answer's turn starts with the tokens that prompted it)
//   the end    "Assistant:" (the model answers from here)
//
// The default model is a small story model: the template gives its answers
// a shape, not instruction following.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "server/api.h"
#include "tierkv/status.h"
#include "tierkv/tokenizer.h"

namespace tierkv::server {

Result<std::vector<int32_t>> ChatPromptTokens(const Tokenizer& tok, std::span<const ChatMessage> messages);

}  // namespace tierkv::server
