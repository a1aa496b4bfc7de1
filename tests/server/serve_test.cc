// Black-box tests of `tierkv serve`: the real binary on a loopback port
// (--port 0, the port read from its first line), a real HTTP client
// (cpp-httplib's), the shipped default model and a cache directory on disk.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "testing/random_model.h"
#include "testing/serve_process.h"
#include "testing/redis_server.h"
#include "testing/shared.h"
#include "testing/shell.h"
#include "tierkv/chat.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

using namespace serve_testing;

using nlohmann::json;

TEST(ServeTest, CompletionChatStreamingMetricsAndReuse) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);

  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tierkv");

  const json req{{"prompt", std::string(kPrefix) + "said"}, {"max_tokens", 8}, {"temperature", 0}};
  int status = 0;
  const json first = Post(c, "/v1/completions", req, &status);
  ASSERT_EQ(status, 200) << first.dump();
  EXPECT_EQ(first["object"], "text_completion");
  EXPECT_EQ(first["usage"]["completion_tokens"], 8);
  EXPECT_EQ(first["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The same prefix again, another ending: its stored K/V is reused.
  const json second = Post(
      c, "/v1/completions",
      {{"prompt", std::string(kPrefix) + "ran"}, {"max_tokens", 4}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << second.dump();
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  // Greedy is deterministic: the first request again gives the same text, from its stored K/V.
  const json again = Post(c, "/v1/completions", req, &status);
  EXPECT_EQ(again["choices"][0]["text"], first["choices"][0]["text"]);

  const json chat = Post(
      c, "/v1/chat/completions",
      {{"messages",
        {{{"role", "system"}, {"content", kPrefix}}, {{"role", "user"}, {"content", "Go on."}}}},
       {"max_tokens", 6},
       {"temperature", 0}},
      &status);
  ASSERT_EQ(status, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat["choices"][0]["message"]["content"].is_string());

  // Streaming: chunks parsed one by one, [DONE] last, text equal to the whole.
  std::string body;
  auto sr = c.Post("/v1/completions",
                   json{{"prompt", std::string(kPrefix) + "said"},
                        {"max_tokens", 8},
                        {"temperature", 0},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}}}
                       .dump(),
                   "application/json");
  ASSERT_TRUE(sr);
  EXPECT_EQ(sr->status, 200);
  EXPECT_EQ(sr->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> events;
  for (size_t at = 0; at < sr->body.size();) {
    const size_t end = sr->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << "an event without its blank line";
    const std::string ev = sr->body.substr(at, end - at);
    ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    events.push_back(ev.substr(6));
    at = end + 2;
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed, finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    if (e["choices"].empty()) {
      EXPECT_EQ(e["usage"]["completion_tokens"], 8);
      continue;
    }
    streamed += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(streamed, first["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(finish, "length");

  const auto m = Metrics(c);
  EXPECT_EQ(m.at("tierkv_requests_total{endpoint=\"/v1/completions\",code=\"200\"}"), 4);
  EXPECT_EQ(m.at("tierkv_requests_total{endpoint=\"/v1/chat/completions\",code=\"200\"}"), 1);
  EXPECT_GT(m.at("tierkv_reused_prompt_tokens_total"), 0);
  EXPECT_EQ(m.at("tierkv_ttft_seconds_count"), 5);
  EXPECT_EQ(m.at("tierkv_completion_tokens_total"), 8 + 4 + 8 + 6 + 8);
  EXPECT_EQ(m.at("tierkv_running_requests"), 0);
  EXPECT_EQ(srv.Stop(), 0);
}

// A model that brings its chat template: a random-weight qwen2 with Qwen2's
// vocabulary and template (ChatML, a default system message). The chat
// endpoint writes the conversation as the template does, the next turn
// reuses this one's prompt, and an unknown template stops the server at
// start, naming the flag.
TEST(ServeTest, ChatUsesTheModelsOwnTemplate) {
  const std::string vocab_path = testing::SharedPath("reference/tokenizers/ggml-vocab-qwen2.gguf");
  if (!testing::SharedExists("reference/tokenizers/ggml-vocab-qwen2.gguf")) {
    GTEST_SKIP() << "needs ../shared/reference (CI has it; a fresh clone without ../shared skips this test)";
  }
  TempDir dir;
  testing::RandomModelSpec spec;
  spec.arch = "qwen2";
  spec.vocab_file = vocab_path;
  spec.biases = true;
  const std::string model_path = dir.path + "/qwen2.gguf";
  testing::WriteRandomModel(model_path, spec);

  ServerProcess srv({"--port", "0", "--cache-dir", dir.path + "/cache", "--model", model_path});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  EXPECT_NE(srv.first_line().find("chat template chatml"), std::string::npos) << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  const json turn1 = {{{"role", "user"}, {"content", "Tell me about the sea."}}};
  int status = 0;
  const json first = Post(c, "/v1/chat/completions", {{"messages", turn1}, {"max_tokens", 4}, {"temperature", 0}},
                          &status);
  ASSERT_EQ(status, 200) << first.dump();
  // The prompt is the template's: default system turn, the user's, the assistant's header.
  auto tok = LoadGgufTokenizer(vocab_path);
  ASSERT_TRUE(tok.ok());
  auto vocab = LoadGgufVocab(vocab_path);
  ASSERT_TRUE(vocab.ok());
  auto t = ChooseChatTemplate(*vocab, "auto");
  ASSERT_TRUE(t.ok());
  auto ids = ChatPromptTokens(**tok, *t, std::vector<ChatMessage>{{"user", "Tell me about the sea."}});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(first["usage"]["prompt_tokens"].get<size_t>(), ids->size());
  // The next turn starts with this one's prompt: all of it is reused.
  json turn2 = turn1;
  turn2.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  turn2.push_back({{"role", "user"}, {"content", "And the rivers?"}});
  const json second = Post(c, "/v1/chat/completions", {{"messages", turn2}, {"max_tokens", 4}, {"temperature", 0}},
                           &status);
  ASSERT_EQ(status, 200) << second.dump();
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<size_t>(), ids->size() - 1);
  EXPECT_EQ(srv.Stop(), 0);

  // A template tierkv does not know: the server does not start, and says which flag chooses one.
  const std::string odd_path = dir.path + "/odd.gguf";
  spec.chat_template = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}";
  testing::WriteRandomModel(odd_path, spec);
  std::string out;
  const int rc = testing::Shell(std::string(TIERKV_BINARY) + " serve --port 0 --cache-dir " + dir.path +
                                    "/cache2 --model " + odd_path + " 2>&1",
                                &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--chat-template"), std::string::npos) << out;
  // ... and runs with the flag.
  ServerProcess named({"--port", "0", "--cache-dir", dir.path + "/cache3", "--model", odd_path,
                       "--chat-template", "chatml"});
  ASSERT_GT(named.port(), 0) << "first line: " << named.first_line();
  EXPECT_NE(named.first_line().find("chosen by --chat-template"), std::string::npos) << named.first_line();
}

TEST(ServeTest, BadRequestsGetOpenAIErrorsNamingTheField) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--max-body-bytes", "4096"});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  struct Case {
    std::string path, body;
    int status;
    std::string param;  // "" : null
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, "body"},
      {"/v1/completions", "[1, 2]", 400, "body"},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "many"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "temperature": 3})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "x", "stop": [1]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
      {"/v1/completions", R"({"prompt": "x", "n": 2})", 400, "n"},
      {"/v1/completions", R"({"prompt": [1, 5000000]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, 4294967297]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1e999})", 400, "body"},
      {"/v1/completions", R"({"prompt": "x", "ignore_eos": 1})", 400, "ignore_eos"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", 400, "max_tokens"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "hi"}]})", 400,
       "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {"/v1/completions", "{\"prompt\": \"" + std::string(5000, 'a') + "\"}", 413, "body"},
  };
  for (const Case& k : cases) {
    auto r = c.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(r) << k.body.substr(0, 80);
    EXPECT_EQ(r->status, k.status) << k.body.substr(0, 80) << " -> " << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r->body;
    EXPECT_TRUE(e["error"]["message"].is_string());
    EXPECT_EQ(e["error"]["param"], k.param) << r->body;
  }
  // The context check says both counts.
  auto r =
      c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("100000"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("4096"), std::string::npos) << r->body;
  auto nf = c.Get("/v2/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  const auto m = Metrics(c);
  EXPECT_EQ(m.at("tierkv_requests_total{endpoint=\"/v1/completions\",code=\"400\"}"), 16);
  EXPECT_EQ(m.at("tierkv_requests_total{endpoint=\"other\",code=\"404\"}"), 1);
  EXPECT_EQ(srv.Stop(), 0);
}

// A restart on the same cache directory finds yesterday's prefixes: the
// request is answered from the disk tier with the same greedy text.
TEST(ServeTest, ARestartAnswersFromTheDiskTierWithTheSameText) {
  TempDir dir;
  const json req{{"prompt", std::string(kPrefix) + "said"}, {"max_tokens", 12}, {"temperature", 0}};
  // One server on `cache`: its answer to `req` (status 200 asserted) and its
  // metrics after it; the server is stopped (exit 0).
  auto serve_once = [&](const std::string& cache, const char* system, json* r,
                        std::map<std::string, double>* m) {
    ServerProcess srv({"--port", "0", "--cache-dir", cache, "--system", system});
    ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
    httplib::Client c("127.0.0.1", srv.port());
    c.set_read_timeout(60);
    int status = 0;
    *r = Post(c, "/v1/completions", req, &status);
    ASSERT_EQ(status, 200) << r->dump();
    *m = Metrics(c);
    EXPECT_EQ(srv.Stop(), 0);
  };
  for (const char* system : {"as-like", "impress"}) {
    SCOPED_TRACE(system);
    const std::string cache = dir.path + "/" + system;
    json before, after;
    std::map<std::string, double> m;
    ASSERT_NO_FATAL_FAILURE(serve_once(cache, system, &before, &m));
    EXPECT_EQ(before["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    ASSERT_NO_FATAL_FAILURE(serve_once(cache, system, &after, &m));
    EXPECT_GT(after["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
    EXPECT_EQ(after["choices"][0]["text"], before["choices"][0]["text"]);
    EXPECT_GT(m.at("tierkv_prefix_hits_total{tier=\"disk\"}"), 0);
    EXPECT_GT(m.at("tierkv_prefix_bytes_read_total{tier=\"disk\"}"), 0);
    EXPECT_EQ(m.at("tierkv_prefix_hits_total{tier=\"device\"}"), 0);
    EXPECT_EQ(m.at("tierkv_prefix_hits_total{tier=\"host\"}"), 0);
  }
}

// Two servers with their own cache directories and one Redis: the second
// answers from what the first computed (the remote tier), with the same
// text, and both show the remote tier on /metrics.
TEST(ServeTest, TwoServersShareAPrefixThroughRedis) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  TempDir dir;
  const json req{{"prompt", std::string(kPrefix) + "said"}, {"max_tokens", 12}, {"temperature", 0}};
  ServerProcess a({"--port", "0", "--cache-dir", dir.path + "/a", "--remote", redis.url(), "--remote-admit", "always"});
  ASSERT_GT(a.port(), 0) << "first line: " << a.first_line();
  httplib::Client ca("127.0.0.1", a.port());
  ca.set_read_timeout(60);
  int status = 0;
  const json first = Post(ca, "/v1/completions", req, &status);
  ASSERT_EQ(status, 200) << first.dump();
  std::map<std::string, double> ma;
  for (int i = 0; i < 200; ++i) {  // written behind the request
    ma = Metrics(ca);
    if (ma.at("tierkv_remote_uploads_total") > 0 && ma.at("tierkv_remote_queued_chunks") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(ma.at("tierkv_remote_uploads_total"), 0);
  EXPECT_GT(ma.at("tierkv_remote_bytes_up_total"), 0);
  EXPECT_EQ(ma.at("tierkv_remote_errors_total{kind=\"connect\"}"), 0);

  ServerProcess b({"--port", "0", "--cache-dir", dir.path + "/b", "--remote", redis.url()});
  ASSERT_GT(b.port(), 0) << "first line: " << b.first_line();
  httplib::Client cb("127.0.0.1", b.port());
  cb.set_read_timeout(60);
  const json second = Post(cb, "/v1/completions", req, &status);
  ASSERT_EQ(status, 200) << second.dump();
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  // The request's lookup ran ahead of it too, from the queue (whichever
  // fetched, the chunks came down once).
  std::map<std::string, double> mb;
  for (int i = 0; i < 200; ++i) {
    mb = Metrics(cb);
    if (mb.at("tierkv_remote_ahead_fetches_total") >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(mb.at("tierkv_remote_ahead_fetches_total"), 1);
  EXPECT_EQ(mb.at("tierkv_remote_hits_total"), ma.at("tierkv_remote_uploads_total"));
  EXPECT_GT(mb.at("tierkv_remote_bytes_down_total"), 0);
  EXPECT_EQ(mb.at("tierkv_remote_corrupt_values_total"), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// Both schedulers in the real binary, one request at a time: where each
// request's prefix was when it waited and when it started is counted
// (nothing stored; then on disk, stored by the first; then in the pools,
// read by the second), the answers are the same, and a scheduler that does
// not exist is refused naming the flag.
TEST(ServeTest, SchedulersCountWhereEachRequestsPrefixWas) {
  TempDir dir;
  const json req{{"prompt", std::string(kPrefix) + "said"}, {"max_tokens", 6}, {"temperature", 0}};
  std::string text;
  for (const char* sched : {"fcfs", "car"}) {
    SCOPED_TRACE(sched);
    ServerProcess srv({"--port", "0", "--cache-dir", dir.path + "/" + sched, "--scheduler", sched,
                       "--max-running", "1"});
    ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
    EXPECT_NE(srv.first_line().find(std::string("scheduler ") + sched), std::string::npos);
    httplib::Client c("127.0.0.1", srv.port());
    c.set_read_timeout(60);
    for (int i = 0; i < 3; ++i) {
      int status = 0;
      const json r = Post(c, "/v1/completions", req, &status);
      ASSERT_EQ(status, 200) << r.dump();
      if (text.empty()) text = r["choices"][0]["text"];
      EXPECT_EQ(r["choices"][0]["text"], text);
    }
    const auto m = Metrics(c);
    for (const char* family : {"tierkv_started_requests_total", "tierkv_waited_requests_total"}) {
      const std::string f = family;
      EXPECT_EQ(m.at(f + "{place=\"none\"}"), 1);
      EXPECT_EQ(m.at(f + "{place=\"disk\"}"), 1);
      EXPECT_EQ(m.at(f + "{place=\"pools\"}"), 1);
    }
    EXPECT_GE(m.at("tierkv_prefix_load_wait_seconds_total{place=\"disk\"}"), 0);
    EXPECT_EQ(m.at("tierkv_prefetched_requests_total{place=\"disk\"}"), 0) << "nothing waited: nothing to prefetch";
    EXPECT_EQ(srv.Stop(), 0);
  }
  std::string out;
  EXPECT_NE(RunCommand(std::string(TIERKV_BINARY) + " serve --scheduler lifo 2>&1", &out), 0);
  EXPECT_NE(out.find("--scheduler"), std::string::npos) << out;
}

// DELETE /v1/cache drops every stored prefix, only with the admin token:
// refused without one configured (403) or with a wrong one (401); after it
// the same request reuses nothing and answers the same.
TEST(ServeTest, TheCacheFlushNeedsTheAdminTokenAndForgetsEveryPrefix) {
  TempDir dir;
  const json req{{"prompt", std::string(kPrefix) + "said"}, {"max_tokens", 6}, {"temperature", 0}};
  {
    ServerProcess srv({"--port", "0", "--cache-dir", dir.path + "/off"});
    ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
    httplib::Client c("127.0.0.1", srv.port());
    auto r = c.Delete("/v1/cache", {{"Authorization", "Bearer anything"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
    EXPECT_NE(r->body.find("--admin-token"), std::string::npos) << r->body;
  }
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path + "/on", "--admin-token", "s3cret"});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  int status = 0;
  const json first = Post(c, "/v1/completions", req, &status);
  ASSERT_EQ(status, 200);
  const json again = Post(c, "/v1/completions", req, &status);
  EXPECT_GT(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  for (const char* auth : {"", "Bearer wrong!", "Bearer s3cret2", "s3cret"}) {
    auto r = c.Delete("/v1/cache", {{"Authorization", auth}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << auth;
    EXPECT_EQ(json::parse(r->body, nullptr, false)["error"]["code"], 401);
  }
  auto r = c.Delete("/v1/cache", {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_GT(json::parse(r->body)["flushed_chunks"].get<int>(), 0);
  auto cache = c.Get("/v1/cache");
  ASSERT_TRUE(cache);
  EXPECT_EQ(json::parse(cache->body)["store"]["live_chunks"], 0) << cache->body;
  const json after = Post(c, "/v1/completions", req, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(after["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(after["choices"][0]["text"], first["choices"][0]["text"]);
  EXPECT_EQ(srv.Stop(), 0);
}

// `retention` per request: a selective server reads that share of the
// prefix rows for it alone; one that reads every row refuses anything but 1.
TEST(ServeTest, ARequestsRetentionIsItsOwn) {
  TempDir dir;
  json req{{"prompt", std::string(kPrefix) + "said"}, {"max_tokens", 4}, {"temperature", 0}};
  {
    ServerProcess srv({"--port", "0", "--cache-dir", dir.path + "/h2o", "--system", "as-h2o-lru"});
    ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
    httplib::Client c("127.0.0.1", srv.port());
    c.set_read_timeout(60);
    int status = 0;
    Post(c, "/v1/completions", req, &status);
    ASSERT_EQ(status, 200);
    EXPECT_EQ(Metrics(c).at("tierkv_important_row_ratio"), 1);
    req["retention"] = 0.25;
    const json r = Post(c, "/v1/completions", req, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_GT(r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
    EXPECT_NEAR(Metrics(c).at("tierkv_important_row_ratio"), 0.25, 0.02);
    EXPECT_EQ(srv.Stop(), 0);
  }
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path + "/as-like"});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  int status = 0;
  req["retention"] = 0.5;
  const json r = Post(c, "/v1/completions", req, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "retention") << r.dump();
  req["retention"] = 1;
  Post(c, "/v1/completions", req, &status);
  EXPECT_EQ(status, 200);
}

// bench-serve against the real server: a two-session chat workload whose
// second turns reuse the first turns' prompts; no errors, the JSON report's
// figures consistent with what the server counted.
TEST(ServeTest, BenchServeDrivesTheServerWithGrowingChats) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  const std::string workload = dir.path + "/chat.jsonl";
  {
    FILE* f = std::fopen(workload.c_str(), "w");
    ASSERT_TRUE(f);
    for (int u = 0; u < 2; ++u) {
      const json line{{"system", kPrefix},
                      {"turns", {"Who is Lily?", "What did she find?", "And then?"}},
                      {"max_tokens", 5}};
      std::fputs((line.dump() + "\n").c_str(), f);
    }
    std::fclose(f);
  }
  const std::string cmd = std::string(TIERKV_BINARY) +
                          " bench-serve --url http://127.0.0.1:" + std::to_string(srv.port()) +
                          " --workload " + workload +
                          " --concurrency 2 --duration 3 --json 2>/dev/null";
  std::string out;
  EXPECT_EQ(RunCommand(cmd, &out), 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_GE(r["requests"].get<int>(), 6);
  EXPECT_EQ(r["errors"], 0) << out;
  EXPECT_EQ(r["completion_tokens"].get<int>(),
            5 * r["ok"].get<int>());  // ignore_eos: every answer is whole
  EXPECT_GT(r["cached_tokens"].get<int>(), 0);
  EXPECT_GT(r["ttft"]["p50_ms"].get<double>(), 0);
  EXPECT_LE(r["ttft"]["p50_ms"].get<double>(), r["e2e"]["p50_ms"].get<double>());
  httplib::Client c("127.0.0.1", srv.port());
  const auto m = Metrics(c);
  EXPECT_EQ(m.at("tierkv_completion_tokens_total"), r["completion_tokens"].get<double>());
  EXPECT_EQ(m.at("tierkv_reused_prompt_tokens_total"), r["cached_tokens"].get<double>());
  // A bad workload line is named.
  {
    FILE* f = std::fopen(workload.c_str(), "w");
    std::fputs("{\"system\": \"x\", \"turns\": []}\n", f);
    std::fclose(f);
  }
  EXPECT_NE(RunCommand(cmd + " 2>&1", &out), 0);
  EXPECT_NE(out.find("line 1: turns"), std::string::npos) << out;
  EXPECT_EQ(srv.Stop(), 0);
}

// clients that hang up, streamed or not, cancel their requests (the queued
// one then starts); the server goes on answering.
TEST(ServeTest, AFullQueueRefusesAndClientsThatLeaveCancel) {
  TempDir dir;
  ServerProcess srv(
      {"--port", "0", "--cache-dir", dir.path, "--max-running", "1", "--max-queue", "1"});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120);
  // Long generations: 3,000 tokens past any end of text.
  json long_req{
      {"prompt", kPrefix}, {"max_tokens", 3000}, {"temperature", 0}, {"ignore_eos", true}};
  RawClient plain(srv.port(), "/v1/completions", long_req.dump());
  ASSERT_TRUE(plain.sent());
  ASSERT_TRUE(AwaitMetrics(c, [](const auto& m) { return At(m, "tierkv_running_requests") == 1; }));
  long_req["stream"] = true;
  RawClient streamed(srv.port(), "/v1/completions", long_req.dump());
  ASSERT_TRUE(streamed.sent());
  ASSERT_TRUE(AwaitMetrics(c, [](const auto& m) { return At(m, "tierkv_queue_length") == 1; }));

  auto r = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "rate_limit_error") << r->body;

  // The running (non-streamed) request's client hangs up: cancelled, and the
  // streamed one starts.
  plain.Close();
  ASSERT_TRUE(AwaitMetrics(c, [](const auto& m) {
    return At(m, "tierkv_generations_total{reason=\"cancelled\"}") == 1 &&
           At(m, "tierkv_queue_length") == 0 && At(m, "tierkv_running_requests") == 1;
  }));
  // The streamed one hangs up after its first tokens.
  ASSERT_TRUE(streamed.ReadUntil("data: {"));
  streamed.Close();
  ASSERT_TRUE(AwaitMetrics(c, [](const auto& m) {
    return At(m, "tierkv_generations_total{reason=\"cancelled\"}") == 2 &&
           At(m, "tierkv_running_requests") == 0;
  }));
  const auto m = Metrics(c);
  EXPECT_LT(At(m, "tierkv_completion_tokens_total"), 2 * 3000);
  EXPECT_EQ(At(m, "tierkv_requests_total{endpoint=\"/v1/completions\",code=\"429\"}"), 1);

  int status = 0;
  const json ok = Post(c, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << ok.dump();
  EXPECT_EQ(srv.Stop(), 0);
}

// SIGTERM while a request runs: new requests are refused (503), the running
// one is cancelled after the grace period, the process exits 0.
// Without --cache-dir the store goes to ~/.cache/tierkv/FINGERPRINT, and
// an account that has no ~/.cache yet gets one.
TEST(ServeTest, TheDefaultCacheDirectoryIsCreatedUnderAFreshHome) {
  TempDir dir;
  const std::string home = dir.path + "/home";
  ASSERT_TRUE(std::filesystem::create_directory(home));
  const char* old_home = std::getenv("HOME");
  const std::string saved_home = old_home ? old_home : "";
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = old_xdg ? old_xdg : "";
  ::setenv("HOME", home.c_str(), 1);
  ::unsetenv("XDG_CACHE_HOME");
  {
    ServerProcess srv({"--port", "0"});  // the child inherits the environment
    EXPECT_GT(srv.port(), 0) << "first line: " << srv.first_line();
    EXPECT_TRUE(std::filesystem::is_directory(home + "/.cache/tierkv"));
    // Private: the store directories below it hold prompts (row 94).
    EXPECT_EQ(std::filesystem::status(home + "/.cache/tierkv").permissions(), std::filesystem::perms::owner_all);
    EXPECT_EQ(srv.Stop(), 0);
  }
  {
    // Another store namespace (here the chunk size) gets its own default
    // directory instead of a refusal of the first one's.
    ServerProcess srv({"--port", "0", "--chunk-tokens", "32"});
    EXPECT_GT(srv.port(), 0) << "first line: " << srv.first_line();
    EXPECT_EQ(srv.Stop(), 0);
  }
  int stores = 0;
  for (const auto& e : std::filesystem::directory_iterator(home + "/.cache/tierkv")) stores += e.is_directory();
  EXPECT_EQ(stores, 2);
  if (old_home) ::setenv("HOME", saved_home.c_str(), 1);
  if (old_xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
}

// The cache directory removed while serving (failure-semantics row 95):
// requests are still answered, /health says the store stopped (200: the
// server still serves), /metrics has the gauge, nothing recreates the path.
TEST(ServeTest, ARemovedCacheDirectoryIsReportedAndRequestsGoOn) {
  TempDir dir;
  const std::string cache = dir.path + "/cache";
  ServerProcess srv({"--port", "0", "--cache-dir", cache});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  int status = 0;
  const json stored = Post(c, "/v1/completions",
                           {{"prompt", std::string(kPrefix) + "said"}, {"max_tokens", 4}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << stored.dump();
  EXPECT_EQ(Metrics(c)["tierkv_store_directory_lost"], 0.0);
  std::filesystem::remove_all(cache);
  const json after = Post(c, "/v1/completions",
                          {{"prompt", "Another prompt entirely, long enough to fill a chunk or two of the store: " +
                                          std::string(kPrefix)},
                           {"max_tokens", 4},
                           {"temperature", 0}},
                          &status);
  EXPECT_EQ(status, 200) << after.dump();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "degraded") << health->body;
  EXPECT_EQ(Metrics(c)["tierkv_store_directory_lost"], 1.0);
  auto cache_stats = c.Get("/v1/cache");
  ASSERT_TRUE(cache_stats);
  EXPECT_EQ(json::parse(cache_stats->body)["store"]["directory_lost"], true) << cache_stats->body;
  EXPECT_EQ(srv.Stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(cache));
}

TEST(ServeTest, SigtermDrainsWithinTheGracePeriod) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--grace-seconds", "0.5"});
  ASSERT_GT(srv.port(), 0) << "first line: " << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120);
  int code = 0;
  std::string body;
  std::thread client([&] {
    httplib::Client lc("127.0.0.1", srv.port());
    lc.set_read_timeout(120);
    const json req{{"prompt", kPrefix}, {"max_tokens", 3000}, {"ignore_eos", true}};
    if (auto r = lc.Post("/v1/completions", req.dump(), "application/json")) {
      code = r->status;
      body = r->body;
    }
  });
  ASSERT_TRUE(AwaitMetrics(c, [](const auto& m) { return At(m, "tierkv_running_requests") == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(srv.Stop(), 0);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  client.join();
  EXPECT_EQ(code, 503) << body;
  EXPECT_LT(waited, 30) << "the grace period is 0.5 s";
}

}  // namespace
}  // namespace tierkv
