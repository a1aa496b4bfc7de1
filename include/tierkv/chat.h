// Chat templates: a conversation to prompt tokens, the way the model was
// trained to read it.
//
// A GGUF file carries its template as Jinja source (tokenizer.chat_template).
// tierkv does not run Jinja: it recognises the common families by their
// markers and renders them with built-in renderers, each checked against
// Python's jinja2 on the templates the models ship
// (tests/model/chat_template_test.cc):
//
//   llama3   Llama 3.1, 3.2, 3.3 ("<|start_header_id|>", with the
//            "Cutting Knowledge Date" system header)
//   chatml   Qwen2, Qwen2.5 and other ChatML templates ("<|im_start|>"),
//            with the template's default system message if it has one
//   mistral  Mistral Nemo ("[INST]...[/INST]" without spaces; the system
//            message goes into the last user turn, as Nemo's template does)
//   tierkv   models without a template (the default model): "User: ..." /
//            "Assistant: ..." lines after BOS
//
// A template none of these recognise is an error that names the
// --chat-template flag, which picks a renderer by name instead.
//
// What is rendered is a list of segments: the template's own text, where
// control tokens' text is parsed ("<|im_start|>" becomes that token), and
// the messages' content, where it is not (a user who writes "<|im_end|>"
// gets that text, not the token). Otherwise the text is tokenized as
// llama.cpp tokenizes a rendered prompt: each run of text between control
// tokens at once. A conversation's next turn then begins with this turn's
// prompt tokens (the runs end at a newline or a control token), and the store
// reuses all of it, except under mistral, whose system message moves. The
// tierkv format tokenizes each of its segments on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/status.h"
#include "tierkv/tokenizer.h"

namespace tierkv {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kTierkv, kLlama3, kChatMl, kMistral };

std::string_view ChatFormatName(ChatFormat f);
// "tierkv", "llama3", "chatml", "mistral"; anything else is InvalidArgument.
Result<ChatFormat> ParseChatFormat(std::string_view name);

// A renderer and what the model's template fixes.
struct ChatTemplate {
  ChatFormat format = ChatFormat::kTierkv;
  bool detected = false;       // from tokenizer.chat_template (else named or the fallback)
  std::string default_system;  // chatml: the system message when none is given
  // llama3's "Today Date: 26 Jul 2024": "" is today's date (UTC), as
  // llama.cpp and transformers render it.
  std::string date;
};

// The template for a model: `choice` is "auto" (recognise the vocabulary's
// tokenizer.chat_template; tierkv when it has none) or a format's name.
Result<ChatTemplate> ChooseChatTemplate(const std::optional<Vocab>& vocab, std::string_view choice);
// Recognises Jinja source; "" is tierkv. Unknown: InvalidArgument naming --chat-template.
Result<ChatTemplate> RecognizeChatTemplate(std::string_view jinja_source);

struct ChatSegment {
  std::string text;
  bool from_template = true;  // control tokens' text parsed (false: a message's content)
};

// The conversation as the template writes it, ending with the prompt for
// the assistant's turn. `bos` and `eos` are the vocabulary's BOS and EOS text
// (the templates that write them). Errors name the message
// ("messages[2].role: ...").
Result<std::vector<ChatSegment>> RenderChat(const ChatTemplate& t, std::span<const ChatMessage> messages,
                                            std::string_view bos, std::string_view eos);
std::string ChatText(std::span<const ChatSegment> segments);

// The prompt's tokens (see above), BOS first when the vocabulary starts
// sequences with it and the template did not write it.
Result<std::vector<int32_t>> ChatPromptTokens(const Tokenizer& tok, const ChatTemplate& t,
                                              std::span<const ChatMessage> messages);

// The token that ends the assistant's turn in this format (llama3
// "<|eot_id|>", chatml "<|im_end|>"), if the vocabulary has it; EOS ends a
// turn anyway.
std::optional<int32_t> ChatEndOfTurnToken(const Tokenizer& tok, const ChatTemplate& t);

}  // namespace tierkv
