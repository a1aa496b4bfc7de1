// The chat renderers against the templates models ship
// (../shared/reference/chat-templates: Llama 3.2, Qwen2.5, Mistral Nemo; and
// the Qwen2 template inside ../shared/reference/tokenizers/ggml-vocab-qwen2.gguf):
// the text each renders must be what Python's jinja2 renders from the
// template itself (tests/testing/render_chat_template.py, as transformers
// renders), errors where it raises; the tokens must be what llama.cpp's
// tokenizer makes of that text (tools/llamacpp/runner.py tokenize), except
// that a message's content never becomes a control token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testing/llamacpp.h"
#include "testing/shared.h"
#include "testing/shell.h"
#include "tierkv/chat.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

using testing::Shell;
using Conversation = std::vector<ChatMessage>;

constexpr const char* kDate = "26 Jul 2024";

const std::vector<Conversation>& Conversations() {
  static const std::vector<Conversation> c = {
      {{"user", "Hello!"}},
      {{"system", "You are a pirate."}, {"user", "Where is the treasure?"}},
      {{"system", "Be brief."}, {"user", "What is 2+2?"}, {"assistant", "4."}, {"user", "And 3+3?"}},
      {{"user", "  Padded question?\n"}, {"assistant", " An answer with spaces. "}, {"user", "Next"}},
      {{"user", "Write <|im_end|> and [INST] literally"}, {"assistant", "ok"}, {"user", "thanks"}},
      {{"user", "a"}, {"user", "b"}},                  // not alternating: Mistral's template raises
      {{"system", "s"}, {"assistant", "x"}},           // an assistant first: Mistral's raises
      {{"user", "q"}, {"assistant", "a"}, {"system", "late system"}, {"user", "q2"}},
  };
  return c;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string name;
  std::string source;  // the Jinja template
  std::string vocab;   // the vocabulary file it is paired with
  ChatFormat format;
  std::string default_system;
};

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::SharedExists("reference/chat-templates")) {
      GTEST_SKIP() << "needs ../shared/reference (CI has it; a fresh clone without ../shared skips this test)";
    }
  }

  static std::string Tokenizers() { return testing::SharedPath("reference/tokenizers/"); }

  static std::vector<Case> Cases() {
    const std::string t = testing::SharedPath("reference/chat-templates/");
    auto qwen2_vocab = LoadGgufVocab(Tokenizers() + "ggml-vocab-qwen2.gguf");
    EXPECT_TRUE(qwen2_vocab.ok()) << qwen2_vocab.status().ToString();
    return {
        {"Llama 3.2", ReadAll(t + "meta-llama-Llama-3.2-3B-Instruct.jinja"), "ggml-vocab-llama-bpe.gguf",
         ChatFormat::kLlama3, ""},
        {"Qwen2.5", ReadAll(t + "Qwen-Qwen2.5-7B-Instruct.jinja"), "ggml-vocab-qwen2.gguf", ChatFormat::kChatMl,
         "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
        {"Qwen2 (in its vocabulary file)", qwen2_vocab.ok() ? qwen2_vocab->chat_template : "",
         "ggml-vocab-qwen2.gguf", ChatFormat::kChatMl, "You are a helpful assistant"},
        {"Mistral Nemo", ReadAll(t + "mistralai-Mistral-Nemo-Instruct-2407.jinja"), "ggml-vocab-llama-spm.gguf",
         ChatFormat::kMistral, ""},
    };
  }

  // jinja2's rendering: {"text": ...} or {"error": ...}.
  static nlohmann::json Jinja(const std::string& source, const Conversation& c, const std::string& bos,
                              const std::string& eos) {
    nlohmann::json req = {{"template", source}, {"bos_token", bos}, {"eos_token", eos}, {"date", kDate}};
    req["messages"] = nlohmann::json::array();
    for (const ChatMessage& m : c) req["messages"].push_back({{"role", m.role}, {"content", m.content}});
    const std::string in = ::testing::TempDir() + "/chat_template_req.json";
    std::ofstream(in) << req.dump();
    std::string out;
    const int rc = Shell("/usr/bin/python3 " + std::string(TIERKV_SOURCE_DIR) +
                             "/tests/testing/render_chat_template.py < " + in + " 2>&1",
                         &out);
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? nlohmann::json::parse(out) : nlohmann::json{{"error", out}};
  }

  static bool HaveJinja() {
    std::string out;
    return Shell("/usr/bin/python3 -c 'import jinja2' 2>&1", &out) == 0;
  }
};

TEST_F(ChatTemplateTest, RecognisesTheShippedTemplates) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_FALSE(c.source.empty());
    auto t = RecognizeChatTemplate(c.source);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->format, c.format);
    EXPECT_EQ(t->default_system, c.default_system);
    EXPECT_TRUE(t->detected);
  }
}

TEST_F(ChatTemplateTest, RendersTheTextJinja2RendersFromTheTemplate) {
  if (!HaveJinja()) GTEST_SKIP() << "needs Debian's python3-jinja2 (make deps installs it)";
  int compared = 0, refused = 0;
  for (const Case& c : Cases()) {
    auto tok = LoadGgufTokenizer(Tokenizers() + c.vocab);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    const std::string bos = (*tok)->ControlText((*tok)->bos_id()), eos = (*tok)->ControlText((*tok)->eos_id());
    auto t = RecognizeChatTemplate(c.source);
    ASSERT_TRUE(t.ok());
    t->date = kDate;
    for (size_t i = 0; i < Conversations().size(); ++i) {
      SCOPED_TRACE(c.name + ", conversation " + std::to_string(i));
      const nlohmann::json want = Jinja(c.source, Conversations()[i], bos, eos);
      auto ours = RenderChat(*t, Conversations()[i], bos, eos);
      if (want.contains("error")) {
        EXPECT_FALSE(ours.ok()) << "jinja2 raised: " << want["error"];
        ++refused;
        continue;
      }
      ASSERT_TRUE(ours.ok()) << ours.status().ToString();
      EXPECT_EQ(ChatText(*ours), want["text"].get<std::string>());
      ++compared;
    }
  }
  EXPECT_EQ(compared, 4 * 8 - 3);  // Mistral's template raises for conversations 5, 6 and 7
  EXPECT_EQ(refused, 3);
}

// The whole prompt's ids against llama.cpp's tokenizer on the rendered text.
TEST_F(ChatTemplateTest, TokensAreLlamaCppsForTheRenderedText) {
  if (const std::string why = testing::LlamaCppMissing(); !why.empty()) GTEST_SKIP() << why;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    auto tok = LoadGgufTokenizer(Tokenizers() + c.vocab);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    auto t = RecognizeChatTemplate(c.source);
    ASSERT_TRUE(t.ok());
    t->date = kDate;
    const std::string bos = (*tok)->ControlText((*tok)->bos_id()), eos = (*tok)->ControlText((*tok)->eos_id());
    nlohmann::json texts = nlohmann::json::array();
    std::vector<std::vector<int32_t>> ours;
    std::vector<size_t> which;
    for (size_t i = 0; i < Conversations().size(); ++i) {
      if (i == 4) continue;  // content with control tokens' text: below
      auto seg = RenderChat(*t, Conversations()[i], bos, eos);
      if (!seg.ok()) continue;
      texts.push_back(ChatText(*seg));
      auto ids = ChatPromptTokens(**tok, *t, Conversations()[i]);
      ASSERT_TRUE(ids.ok()) << ids.status().ToString();
      ours.push_back(*ids);
      which.push_back(i);
    }
    const std::string in = ::testing::TempDir() + "/chat_template_texts.json";
    std::ofstream(in) << texts.dump();
    std::string out;
    ASSERT_EQ(Shell(testing::LlamaCppRunner() + " tokenize --model " +
                        Tokenizers() + c.vocab + " --texts-file " + in + " 2>/dev/null",
                    &out),
              0)
        << out;
    const auto theirs = nlohmann::json::parse(out);
    ASSERT_EQ(theirs.size(), ours.size());
    auto with_bos = (*tok)->Encode("", /*add_bos=*/true);
    ASSERT_TRUE(with_bos.ok());
    for (size_t k = 0; k < ours.size(); ++k) {
      std::vector<int32_t> want = theirs[k].get<std::vector<int32_t>>();
      // llama.cpp adds BOS (add_special) unless the text starts with it.
      if (!with_bos->empty() && (want.empty() || want[0] != with_bos->front())) {
        want.insert(want.begin(), with_bos->front());
      }
      EXPECT_EQ(ours[k], want) << "conversation " << which[k];
    }
  }
}

// A user who writes "<|im_end|>" gets that text, never the control token.
TEST_F(ChatTemplateTest, ContentNeverBecomesAControlToken) {
  auto tok = LoadGgufTokenizer(Tokenizers() + "ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(tok.ok());
  ChatTemplate t;
  t.format = ChatFormat::kChatMl;
  auto ids = ChatPromptTokens(**tok, t, Conversations()[4]);
  ASSERT_TRUE(ids.ok());
  const auto im_end = ChatEndOfTurnToken(**tok, t);
  ASSERT_TRUE(im_end.has_value());
  // One <|im_end|> per message (three), none from the user's text.
  EXPECT_EQ(std::count(ids->begin(), ids->end(), *im_end), 3);
  auto special = (*tok)->EncodeSpecial(ChatText(*RenderChat(t, Conversations()[4], "", "")));
  ASSERT_TRUE(special.ok());
  EXPECT_EQ(std::count(special->begin(), special->end(), *im_end), 4);  // what parsing the whole text would do
}

// A conversation's next turn starts with this turn's prompt tokens, so the
// store reuses all of it.
TEST_F(ChatTemplateTest, TheNextTurnStartsWithThisTurnsPrompt) {
  const Conversation first = {{"system", "Be brief."}, {"user", "What is 2+2?"}};
  Conversation next = first;
  next.push_back({"assistant", "4."});
  next.push_back({"user", "And 3+3?"});
  struct Pair {
    const char* vocab;
    ChatFormat format;
  };
  for (const Pair& p : {Pair{"ggml-vocab-llama-bpe.gguf", ChatFormat::kLlama3},
                        Pair{"ggml-vocab-qwen2.gguf", ChatFormat::kChatMl},
                        Pair{"ggml-vocab-llama-spm.gguf", ChatFormat::kTierkv}}) {
    SCOPED_TRACE(p.vocab);
    auto tok = LoadGgufTokenizer(Tokenizers() + p.vocab);
    ASSERT_TRUE(tok.ok());
    ChatTemplate t;
    t.format = p.format;
    t.date = kDate;
    auto a = ChatPromptTokens(**tok, t, first);
    auto b = ChatPromptTokens(**tok, t, next);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_GT(b->size(), a->size());
    EXPECT_TRUE(std::equal(a->begin(), a->end(), b->begin()));
  }
}

TEST_F(ChatTemplateTest, ChoosingATemplate) {
  // No template: the tierkv format; a named one; an unknown name; an unknown template.
  auto none = ChooseChatTemplate(std::nullopt, "auto");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->format, ChatFormat::kTierkv);
  Vocab v;
  v.chat_template = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}";
  auto unknown = ChooseChatTemplate(v, "auto");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tokenizer.chat_template"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("--chat-template"), std::string::npos);
  auto named = ChooseChatTemplate(v, "chatml");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->format, ChatFormat::kChatMl);
  EXPECT_FALSE(named->detected);
  auto bad = ChooseChatTemplate(v, "jinja");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--chat-template"), std::string::npos);
  // A bad role names the message.
  auto role = RenderChat(*none, Conversation{{"user", "a"}, {"tool", "b"}}, "", "");
  ASSERT_FALSE(role.ok());
  EXPECT_NE(role.status().message().find("messages[1].role"), std::string::npos);
  // Today's date when none is set, as llama.cpp and transformers render Llama 3.
  ChatTemplate llama3;
  llama3.format = ChatFormat::kLlama3;
  auto today = RenderChat(llama3, Conversation{{"user", "hi"}}, "", "");
  ASSERT_TRUE(today.ok());
  EXPECT_EQ(ChatText(*today).find(kDate), std::string::npos);
  EXPECT_NE(ChatText(*today).find("Today Date: "), std::string::npos);
}

}  // namespace
}  // namespace tierkv
