// Black-box tests of `tierkv serve` against what a hostile client, a
// browser page or an operator's mistake does (issue 34): the real binary on
// a loopback port, raw sockets for framings an HTTP library will not send,
// and the official OpenAI Python client (tools/openai/client.py, installed
// by tools/llamacpp/setup.sh; skipped without it)
// where a client's view matters.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/fake_redis.h"
#include "testing/llamacpp.h"
#include "testing/redis_server.h"
#include "testing/serve_process.h"
#include "tierkv/elapsed.h"
#include "tierkv/tokenizer.h"

namespace tierkv {
namespace {

using namespace serve_testing;
using Clock = std::chrono::steady_clock;

// A connection on a plain socket: sends what it is given, reads until the
// server closes (or `seconds` pass). `from`: the loopback address it comes
// from (127.0.0.0/8 is all this machine's), as another client would.
class Conn {
 public:
  explicit Conn(int port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from) {
      sockaddr_in f{};
      f.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &f.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&f), sizeof f) != 0) return;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // Whatever has arrived within `ms`, without waiting for the close.
  std::string Poll(int ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) > 0) ReadSome();
    return got_;
  }
  // Reads until the peer closes or `seconds` pass; true if it closed.
  bool ReadToClose(double seconds) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      if (!ReadSome()) return true;
    }
    return false;
  }
  const std::string& got() const { return got_; }
  int status() const {
    return got_.rfind("HTTP/1.", 0) == 0 && got_.size() > 12 ? std::atoi(got_.c_str() + 9) : 0;
  }

 private:
  bool ReadSome() {
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string got_;
};

// One raw request; the status line's code and the whole answer (the
// server must close the connection within `seconds`).
int Exchange(int port, const std::string& request, std::string* answer = nullptr, double seconds = 10,
             const char* from = nullptr) {
  Conn c(port, from);
  EXPECT_TRUE(c.connected());
  c.Send(request);
  EXPECT_TRUE(c.ReadToClose(seconds)) << "the server kept the connection open after: " << request.substr(0, 200);
  if (answer) *answer = c.got();
  return c.status();
}

uint64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

const std::string kHead = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";

TEST(HostileClientTest, BodiesOverTheLimitAreRefusedHoweverFramed) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--max-body-bytes", "65536"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  const uint64_t rss0 = RssKiB(srv.pid());
  // 200 chunks of 1 MiB: answered 413 as soon as the limit is passed.
  {
    Conn c(srv.port());
    ASSERT_TRUE(c.connected());
    const auto t0 = Clock::now();
    c.Send(kHead + "Transfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "100000\r\n" + std::string(1 << 20, 'a') + "\r\n";
    for (int i = 0; i < 200 && c.status() == 0; ++i) {
      if (!c.Send(chunk)) break;
      c.Poll(0);
    }
    c.ReadToClose(10);
    EXPECT_EQ(c.status(), 413) << c.got().substr(0, 300);
    EXPECT_NE(c.got().find("larger than the server's limit of 65536 bytes"), std::string::npos);
    EXPECT_LT(SecondsSince(t0), 10);
  }
  EXPECT_LT(RssKiB(srv.pid()), rss0 + 64 * 1024) << "the server buffered the body";
  // Content-Length over the limit, huge, negative, conflicting, beside chunked.
  std::string ans;
  auto t0 = Clock::now();
  EXPECT_EQ(Exchange(srv.port(), kHead + "Content-Length: 1099511627776\r\n\r\n", &ans), 413) << ans;
  EXPECT_EQ(Exchange(srv.port(), kHead + "Content-Length: -1\r\n\r\n", &ans), 400) << ans;
  EXPECT_NE(ans.find("Content-Length"), std::string::npos) << ans;
  EXPECT_LT(SecondsSince(t0), 3) << "refusals must not wait for a body";
  EXPECT_EQ(Exchange(srv.port(), kHead + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", &ans), 400) << ans;
  EXPECT_NE(ans.find("conflicting"), std::string::npos) << ans;
  EXPECT_EQ(Exchange(srv.port(), kHead + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", &ans), 400);
  EXPECT_EQ(Exchange(srv.port(), kHead + "Transfer-Encoding: gzip\r\n\r\n", &ans), 501) << ans;
  EXPECT_EQ(Exchange(srv.port(), kHead + "\r\n", &ans), 411) << ans;
  // Malformed chunked framing: 400 and the connection closes.
  EXPECT_EQ(Exchange(srv.port(), kHead + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", &ans), 400);
  // A well-formed chunked body under the limit is served.
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":2})";
  char len[16];
  std::snprintf(len, sizeof len, "%zx", body.size());
  EXPECT_EQ(Exchange(srv.port(), kHead + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + len + "\r\n" +
                                     body + "\r\n0\r\n\r\n", &ans), 200) << ans;
  httplib::Client h("127.0.0.1", srv.port());
  auto r = h.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(srv.Stop(), 0);
}

// cpp-httplib grows a header line until it ends and counts no headers: a
// head that never ends is cut at 64 KiB (431), its memory with it.
TEST(HostileClientTest, HeadsThatNeverEndAreCut) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  const uint64_t rss0 = RssKiB(srv.pid());
  std::string ans;
  {
    Conn c(srv.port());
    c.Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ");
    const std::string mib(1 << 20, 'a');
    for (int i = 0; i < 256 && c.status() == 0; ++i) {
      if (!c.Send(mib)) break;
      c.Poll(0);
    }
    c.ReadToClose(10);
    EXPECT_EQ(c.status(), 431) << c.got().substr(0, 200);
  }
  std::string many = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 20000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(Exchange(srv.port(), many + "\r\n", &ans), 431) << ans.substr(0, 200);
  EXPECT_LT(RssKiB(srv.pid()), rss0 + 64 * 1024) << "the server kept the head";
  EXPECT_EQ(Exchange(srv.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", &ans),
            400) << ans;
  EXPECT_EQ(Exchange(srv.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nGET /", &ans),
            400) << "a GET's body would be read as the next request";
  EXPECT_EQ(srv.Stop(), 0);
}

// Only the inference routes read a body (under the limit); any other body,
// a method no route answers, a header cpp-httplib would misread, and what
// follows a chunked body are refused or never run.
TEST(HostileClientTest, NoRequestHidesInsideAnother) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--admin-token", "adm"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  std::string ans;
  const auto t0 = Clock::now();
  EXPECT_EQ(Exchange(srv.port(), "PUT /x HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                     std::string(100000, 'a'), &ans), 405) << ans.substr(0, 200);
  EXPECT_EQ(Exchange(srv.port(), "POST /health HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                     std::string(100000, 'a'), &ans), 400) << ans.substr(0, 200);
  EXPECT_EQ(Exchange(srv.port(), "PRI /x HTTP/1.1\r\nHost: localhost\r\n\r\n", &ans), 405) << ans.substr(0, 200);
  EXPECT_LT(SecondsSince(t0), 5) << "bodies nobody reads must be refused from the head";
  // A chunked DELETE's body would be parsed as the next request: refused, one answer.
  Exchange(srv.port(), "DELETE /v1/cache HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "5\r\nhello\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", &ans);
  EXPECT_EQ(ans.rfind("HTTP/1.1 "), 0u) << "a second response: " << ans;
  // A chunk without its CRLF ends cpp-httplib's body early; what follows never runs.
  const std::string smuggle =
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n1e\r\n{\"prompt\":\"hi\",\"max_tokens\":2}XX\r\n"
      "DELETE /v1/cache HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer adm\r\nContent-Length: 0\r\n\r\n0\r\n\r\n";
  Exchange(srv.port(), smuggle, &ans);
  EXPECT_EQ(ans.find("flushed_chunks"), std::string::npos) << ans;
  EXPECT_EQ(ans.find("HTTP/1.1 ", 1), std::string::npos) << "a second response: " << ans;
  // "Transfer-Encoding : chunked" is no Transfer-Encoding to cpp-httplib, but is to a proxy.
  EXPECT_EQ(Exchange(srv.port(), "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                 "Transfer-Encoding : chunked\r\nContent-Length: 2\r\n\r\n{}", &ans), 400) << ans;
  // OpenAI clients' shapes: a developer message, an assistant turn with null content, tool_choice auto.
  httplib::Client c("127.0.0.1", srv.port());
  int status = 0;
  json r = Post(c, "/v1/chat/completions",
                json{{"messages", {{{"role", "developer"}, {"content", "Be brief."}},
                                   {{"role", "assistant"}, {"content", nullptr}},
                                   {{"role", "user"}, {"content", "Hi"}}}},
                     {"max_tokens", 2}, {"tool_choice", "auto"}},
                &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(srv.Stop(), 0);
}

TEST(HostileClientTest, SlowClientsAreCutOffAndHealthIsAlwaysAnswered) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--request-timeout-seconds", "3"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  std::vector<std::unique_ptr<Conn>> slow;
  // 80: more than the 76 workers cpp-httplib's pool had (max_queue + max_running + 4),
  // from 4 addresses (each under its cap of a quarter of the 256 connections).
  static const char* kFrom[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
  for (int i = 0; i < 80; ++i) {
    slow.push_back(std::make_unique<Conn>(srv.port(), kFrom[i % 4]));
    ASSERT_TRUE(slow.back()->connected());
    slow.back()->Send(kHead + "Content-Length: 1000\r\n\r\n{");
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (auto& c : slow) c->Send(" ");
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  httplib::Client h("127.0.0.1", srv.port());
  h.set_read_timeout(2);
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    auto r = h.Get("/health");
    EXPECT_TRUE(r) << "/health not answered beside 80 slow clients";
    if (r) {
      EXPECT_EQ(r->status, 200);
    }
    EXPECT_LT(SecondsSince(t0), 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  // Past the deadline every slow client has been answered 408 and closed.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  int timed_out = 0;
  for (auto& c : slow) {
    c->ReadToClose(5);
    timed_out += c->status() == 408;
  }
  stop = true;
  drip.join();
  EXPECT_EQ(timed_out, 80);
  EXPECT_GE(At(Metrics(h), "tierkv_http_request_timeouts_total"), 80);
  // Beyond --max-connections, one more is answered 503 at once.
  ServerProcess capped({"--port", "0", "--cache-dir", dir.path + "/capped", "--max-connections", "4",
                        "--max-connections-per-address", "4"});
  ASSERT_GT(capped.port(), 0) << capped.first_line();
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Conn>(capped.port()));
    held.back()->Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");  // the head never ends
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string ans;
  const auto t0 = Clock::now();
  EXPECT_EQ(Exchange(capped.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", &ans), 503) << ans;
  EXPECT_LT(SecondsSince(t0), 2);
  held.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  httplib::Client hc("127.0.0.1", capped.port());
  EXPECT_GE(At(Metrics(hc), "tierkv_http_connections_refused_total"), 1);
  EXPECT_EQ(capped.Stop(), 0);
  EXPECT_EQ(srv.Stop(), 0);
}

TEST(HostileClientTest, ASecondServerOnTheSamePortFails) {
  TempDir dir;
  ServerProcess first({"--port", "0", "--cache-dir", dir.path + "/a"});
  ASSERT_GT(first.port(), 0) << first.first_line();
  const std::string err = dir.path + "/second.err";
  ServerProcess second({"--port", std::to_string(first.port()), "--cache-dir", dir.path + "/b"}, {}, err);
  EXPECT_EQ(second.port(), -1) << "the second server started: " << second.first_line();
  EXPECT_EQ(second.Stop(), 1);
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("address in use"), std::string::npos) << text;
  EXPECT_EQ(first.Stop(), 0);
}

TEST(HostileClientTest, BrowserPagesCannotDriveTheServer) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":2})";
  const auto post = [&](const std::string& headers) {
    std::string ans;
    const int code = Exchange(srv.port(),
                              "POST /v1/completions HTTP/1.1\r\n" + headers + "Content-Length: " +
                                  std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body,
                              &ans);
    return std::make_pair(code, ans);
  };
  // A form or text/plain post, which a page sends cross-site without asking.
  auto [code, ans] = post("Host: 127.0.0.1\r\nContent-Type: text/plain\r\n");
  EXPECT_EQ(code, 415) << ans;
  EXPECT_EQ(post("Host: 127.0.0.1\r\n").first, 415);
  // DNS rebinding: the page's own host name.
  std::tie(code, ans) = post("Host: evil.example:" + std::to_string(srv.port()) + "\r\nContent-Type: application/json\r\n");
  EXPECT_EQ(code, 403) << ans;
  EXPECT_EQ(post("Content-Type: application/json\r\n").first, 400) << "HTTP/1.1 without Host";
  // Another site's page.
  std::tie(code, ans) = post("Host: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\n");
  EXPECT_EQ(code, 403) << ans;
  EXPECT_EQ(ans.find("Access-Control-Allow-Origin"), std::string::npos);
  std::tie(code, ans) = post("Host: localhost\r\nContent-Type: application/json; charset=utf-8\r\n");
  EXPECT_EQ(code, 200) << ans;
  // No CORS by default: a preflight gets no grant.
  EXPECT_EQ(Exchange(srv.port(), "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: "
                                 "https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n", &ans), 403);
  EXPECT_EQ(ans.find("Access-Control-Allow-Origin"), std::string::npos) << ans;
  EXPECT_EQ(srv.Stop(), 0);

  // --cors-origin and --allowed-hosts grant one origin and one name.
  ServerProcess open({"--port", "0", "--cache-dir", dir.path, "--cors-origin", "https://app.example",
                      "--allowed-hosts", "tierkv.internal"});
  ASSERT_GT(open.port(), 0) << open.first_line();
  EXPECT_EQ(Exchange(open.port(), "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: "
                                  "https://app.example\r\nAccess-Control-Request-Method: POST\r\n"
                                  "Connection: close\r\n\r\n", &ans), 204) << ans;
  EXPECT_NE(ans.find("Access-Control-Allow-Origin: https://app.example"), std::string::npos) << ans;
  httplib::Client c("127.0.0.1", open.port());
  auto r = c.Post("/v1/completions", {{"Origin", "https://app.example"}, {"Host", "tierkv.internal"}}, body,
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(open.Stop(), 0);
}

// Runs the official OpenAI Python client (tools/openai/client.py); its one JSON line.
json OpenAiClient(int port, const std::string& key, const std::string& command, const json& req) {
  const std::string cmd = testing::ProjectPython() + " " + std::string(TIERKV_SOURCE_DIR) + "/tools/openai/client.py http://127.0.0.1:" +
                          std::to_string(port) + "/v1 " + key + " " + command + " '" + req.dump() + "'";
  std::string out;
  RunCommand(cmd, &out);
  return json::parse(out, nullptr, false);
}

bool HaveOpenAiClient() { return testing::LlamaCppMissing().empty(); }

#define REQUIRE_OPENAI_CLIENT()                                                                  \
  do {                                                                                           \
    if (!HaveOpenAiClient()) GTEST_SKIP() << testing::LlamaCppMissing(); \
  } while (0)

// `n` streams of the OpenAI client at once, request i from `req(i)`, each
// on its own thread; Join waits for them and gives their JSON lines.
class ClientStreams {
 public:
  ClientStreams(int port, int n, const std::string& command, const std::function<json(int)>& req) : results_(n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, port, i, command, r = req(i)] { results_[i] = OpenAiClient(port, "-", command, r); });
    }
  }
  ~ClientStreams() { Join(); }
  const std::vector<json>& Join() {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    return results_;
  }

 private:
  std::vector<json> results_;
  std::vector<std::thread> threads_;
};

TEST(HostileClientTest, SigtermEndsEveryStreamWithItsLastEventAndRefusesNewOnes) {
  REQUIRE_OPENAI_CLIENT();
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--grace-seconds", "1"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  ClientStreams streams(srv.port(), 4, "completion", [](int i) {
    return json{{"model", "tierkv"}, {"prompt", std::string(kPrefix) + std::to_string(i)},
                {"max_tokens", 1500}, {"ignore_eos", true}, {"stream", true}};
  });
  httplib::Client c("127.0.0.1", srv.port());
  EXPECT_TRUE(AwaitMetrics(c, [](const auto& m) { return At(m, "tierkv_running_requests") == 4; }));
  ::kill(srv.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Draining: new requests are answered 503, not refused at the socket.
  auto h = c.Get("/health");
  auto p = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":1})", "application/json");
  const std::vector<json>& results = streams.Join();
  EXPECT_TRUE(h) << "the listener closed before the streams ended";
  if (h) {
    EXPECT_EQ(h->status, 503);
  }
  EXPECT_TRUE(p);
  if (p) {
    EXPECT_EQ(p->status, 503);
  }
  for (const json& r : results) {
    // Either finished, or ended by the server's error event: never a cut connection.
    if (r.value("ok", false)) continue;
    EXPECT_EQ(r.value("kind", ""), "APIError") << r.dump();
    EXPECT_NE(r.value("message", "").find("shut down"), std::string::npos) << r.dump();
  }
  EXPECT_EQ(srv.Wait(), 0);
}

TEST(HostileClientTest, ShortStreamsFinishWithinTheGracePeriod) {
  REQUIRE_OPENAI_CLIENT();
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--grace-seconds", "60"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  ClientStreams streams(srv.port(), 3, "chat", [](int) {
    return json{{"model", "tierkv"}, {"messages", {{{"role", "user"}, {"content", kPrefix}}}},
                {"max_tokens", 150}, {"ignore_eos", true}, {"stream", true}};
  });
  httplib::Client c("127.0.0.1", srv.port());
  EXPECT_TRUE(AwaitMetrics(c, [](const auto& m) { return At(m, "tierkv_running_requests") == 3; }));
  ::kill(srv.pid(), SIGTERM);
  for (const json& r : streams.Join()) {
    ASSERT_TRUE(r.value("ok", false)) << r.dump();
    EXPECT_EQ(r["result"].value("finish_reason", ""), "length") << r.dump();
  }
  EXPECT_EQ(srv.Wait(), 0);
}

// The official client's view of keys and reuse: a wrong key is its
// AuthenticationError (401), the right one is served, and a second chat
// request on the same long prefix reports the reused prompt tokens in
// usage.prompt_tokens_details.cached_tokens, the field the client types.
TEST(HostileClientTest, TheClientSeesKeysAndCachedTokens) {
  REQUIRE_OPENAI_CLIENT();
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--api-key", "key-carol"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  const json req = {{"model", "tierkv"},
                    {"messages", {{{"role", "system"}, {"content", kPrefix}}, {{"role", "user"}, {"content", "Go on."}}}},
                    {"max_tokens", 4}};
  const json wrong = OpenAiClient(srv.port(), "key-mallory", "chat", req);
  EXPECT_FALSE(wrong.value("ok", true)) << wrong.dump();
  EXPECT_EQ(wrong.value("kind", ""), "AuthenticationError") << wrong.dump();
  EXPECT_EQ(wrong.value("status", 0), 401) << wrong.dump();
  const json first = OpenAiClient(srv.port(), "key-carol", "chat", req);
  ASSERT_TRUE(first.value("ok", false)) << first.dump();
  const json second = OpenAiClient(srv.port(), "key-carol", "chat", req);
  ASSERT_TRUE(second.value("ok", false)) << second.dump();
  const json& usage = second["result"]["usage"];
  EXPECT_GT(usage["prompt_tokens_details"].value("cached_tokens", 0), 0) << second.dump();
  EXPECT_LT(usage["prompt_tokens_details"].value("cached_tokens", 0), usage.value("prompt_tokens", 0));
  EXPECT_EQ(srv.Stop(), 0);
}

TEST(HostileClientTest, ASmallerFaultsListIsAnsweredCleanly) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--model-id", "kv-model"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  int status = 0;
  // A chat over the context without max_tokens names the prompt's length.
  std::string longtext;
  for (int i = 0; i < 60; ++i) longtext += kPrefix;
  json r = Post(c, "/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", longtext}}}}}, &status);
  EXPECT_EQ(status, 400);
  const std::string m = r["error"].value("message", "");
  EXPECT_NE(m.find("the model's context is"), std::string::npos) << m;
  EXPECT_EQ(m.find("max_tokens -"), std::string::npos) << m;
  // Fields that would change the answer are refused, named.
  for (const json& extra : {json{{"logprobs", 3}}, json{{"echo", true}}, json{{"best_of", 2}},
                            json{{"logit_bias", {{"50", 10}}}}, json{{"presence_penalty", 0.5}},
                            json{{"frequency_penalty", 1}}, json{{"response_format", {{"type", "json_object"}}}}}) {
    json body{{"prompt", "Once"}, {"max_tokens", 1}};
    body.update(extra);
    r = Post(c, "/v1/completions", body, &status);
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_EQ(r["error"].value("param", ""), extra.begin().key()) << r.dump();
  }
  json body{{"prompt", "Once"}, {"max_tokens", 1}, {"logprobs", nullptr}, {"presence_penalty", 0}, {"echo", false}};
  Post(c, "/v1/completions", body, &status);
  EXPECT_EQ(status, 200) << "defaults are accepted";
  auto g = c.Get("/v1/models/kv-model");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 200);
  EXPECT_EQ(json::parse(g->body).value("id", ""), "kv-model");
  g = c.Get("/v1/models/other");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 404);
  if (HaveOpenAiClient()) {
    const json got = OpenAiClient(srv.port(), "-", "retrieve", json{{"id", "kv-model"}});
    EXPECT_TRUE(got.value("ok", false)) << got.dump();
    EXPECT_EQ(got["result"].value("id", ""), "kv-model") << got.dump();
  }
  // An HTTP/1.0 client is streamed without chunked framing, ended by the close.
  const std::string sbody = R"({"prompt":"Once upon a time","max_tokens":3,"stream":true})";
  std::string ans;
  EXPECT_EQ(Exchange(srv.port(), "POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
                                     std::to_string(sbody.size()) + "\r\n\r\n" + sbody, &ans), 200) << ans;
  EXPECT_EQ(ans.find("Transfer-Encoding: chunked"), std::string::npos) << ans;
  EXPECT_NE(ans.find("data: [DONE]"), std::string::npos) << ans;
  EXPECT_EQ(srv.Stop(), 0);
}

// The tokens the server stores for a completion prompt (BOS first).
std::vector<int32_t> PromptTokens(const Tokenizer& tok, const std::string& text) {
  auto t = tok.Encode(text, /*add_bos=*/true);
  EXPECT_TRUE(t.ok());
  return t.ok() ? *t : std::vector<int32_t>{};
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

TEST(HostileClientTest, OneKeyNeverLearnsWhatAnotherStored) {
  auto tok = LoadGgufTokenizer(TIERKV_DEFAULT_MODEL);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--api-key", "key-alice", "--admin-token", "adm"},
                    {"TIERKV_API_KEYS=key-bob"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  httplib::Client alice("127.0.0.1", srv.port()), bob("127.0.0.1", srv.port()), anon("127.0.0.1", srv.port());
  alice.set_bearer_token_auth("key-alice");
  bob.set_bearer_token_auth("key-bob");
  int status = 0;
  Post(anon, "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 1}}, &status);
  EXPECT_EQ(status, 401);
  auto models = anon.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  const auto prompt = [](int secret) {
    return std::string(kPrefix) + " The secret number is " + std::to_string(secret) +
           ". Lily smiled and walked home with Max, and the sun went down behind the hills.";
  };
  const int secret = 73914;
  const auto cached = [](const json& r) { return r["usage"]["prompt_tokens_details"].value("cached_tokens", -1); };
  Post(alice, "/v1/completions", json{{"prompt", prompt(secret)}, {"max_tokens", 1}}, &status);
  ASSERT_EQ(status, 200);
  json again = Post(alice, "/v1/completions", json{{"prompt", prompt(secret)}, {"max_tokens", 1}}, &status);
  const std::vector<int32_t> secret_tokens = PromptTokens(**tok, prompt(secret));
  EXPECT_GE(cached(again), 64) << "alice reuses her own prefix";
  // Bob guesses 100 times, the right number among them: each answer
  // reports at most what his own earlier guesses share with it.
  std::vector<std::vector<int32_t>> bobs;
  for (int i = 0; i < 100; ++i) {
    const int guess = i == 57 ? secret : 73000 + i * 7;
    const std::vector<int32_t> t = PromptTokens(**tok, prompt(guess));
    size_t own = 0;
    for (const auto& b : bobs) own = std::max(own, CommonPrefix(b, t));
    own = std::min(own, t.size() - 1);
    json r = Post(bob, "/v1/completions", json{{"prompt", prompt(guess)}, {"max_tokens", 1}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_LE(cached(r), static_cast<int>(own)) << "guess " << guess << " (the secret: " << (guess == secret) << ")";
    EXPECT_EQ(r["tierkv"].value("reused_tokens", -1), cached(r));
    bobs.push_back(t);
  }
  // A cache_salt splits alice's own namespace.
  json salted = Post(alice, "/v1/completions",
                     json{{"prompt", prompt(secret)}, {"max_tokens", 1}, {"cache_salt", "team-2"}}, &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(cached(salted), 0);
  // /metrics and /v1/cache are the operator's: their counts move with every
  // key's requests. Nothing of the prompts nor of the keys in them.
  auto metrics = bob.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 401);
  httplib::Client admin("127.0.0.1", srv.port());
  admin.set_bearer_token_auth("adm");
  metrics = admin.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->body.find("73914"), std::string::npos);
  EXPECT_EQ(metrics->body.find("key-"), std::string::npos);
  // The scheme is case-insensitive, spaces after it are one (RFC 9110).
  httplib::Client lower("127.0.0.1", srv.port());
  lower.set_default_headers({{"Authorization", "bearer   key-bob"}});
  Post(lower, "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 1}}, &status);
  EXPECT_EQ(status, 200);
  auto cache = bob.Get("/v1/cache");
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->status, 401);
  EXPECT_EQ(srv.Stop(), 0);
}


// The peak resident set (VmHWM) of process `pid`, in KiB.
uint64_t PeakRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Issue 57 (1): a Redis that drips its reply, announces a 1 GB string, or
// an array of 2^31-1 elements once asked for a value. Before the fix a
// running stream got no token for 15 s, an unrelated 2-token request took
// 13-19 s, and the server's RSS grew from 72 MiB to 2 GiB. Now: each
// long prompt (whose lookups go to Redis, ahead, off the scheduler thread)
// costs itself one timeout; a short request sent right after it takes
// what it takes without Redis, a running stream keeps its pace, and the
// peak RSS stays under twice the idle one.
// A server on `remote`: a brief request's latency alone (idle) and sent
// beside each of four long prompts whose lookups go to that Redis, the
// worst gap of a stream running through it all, and the server's RSS idle
// and at its peak. `hostile` is called once the idle figures are taken.
void BesideARedis(const std::string& remote, const std::string& label, const std::function<void()>& hostile) {
  TempDir dir;
  ServerProcess s({"--port", "0", "--cache-dir", dir.path, "--remote", remote},
                  {std::string("TIERKV_REMOTE_KEY=") + testing::kTestRemoteKey});
  ASSERT_GT(s.port(), 0) << s.first_line();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(60);
  const json brief{{"prompt", "Once upon a time"}, {"max_tokens", 2}, {"temperature", 0}};
  const auto timed = [&](const json& body) {
    const auto t0 = Clock::now();
    int status = 0;
    Post(c, "/v1/completions", body, &status);
    EXPECT_EQ(status, 200);
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  std::vector<double> idle;
  for (int i = 0; i < 5; ++i) idle.push_back(timed(brief));
  const uint64_t rss_idle = RssKiB(s.pid());
  hostile();
  // A stream running through it all: the largest gap between its events.
  std::atomic<double> worst_gap{0};
  std::thread stream([&] {
    const json req{{"prompt", "The little dog"}, {"max_tokens", 160}, {"temperature", 0}, {"stream", true},
                   {"ignore_eos", true}};
    const std::string body = req.dump();
    Conn sc(s.port());
    sc.Send(kHead + "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    auto last = Clock::now();
    size_t seen = 0;
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < until && sc.got().find("[DONE]") == std::string::npos) {
      if (sc.Poll(50).size() == seen) continue;
      seen = sc.got().size();
      const auto now = Clock::now();
      const double gap = std::chrono::duration<double, std::milli>(now - last).count();
      if (gap > worst_gap) worst_gap = gap;
      last = now;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<double> after;
  for (int i = 0; i < 4; ++i) {
    // A long prompt of its own (whole chunks past anything local: Redis is asked), not waited for.
    std::string text = std::string(kPrefix) + " Round " + std::to_string(i) + ".";
    std::thread long_one([&, text] {
      httplib::Client lc("127.0.0.1", s.port());
      lc.set_read_timeout(60);
      int status = 0;
      Post(lc, "/v1/completions", json{{"prompt", text}, {"max_tokens", 1}, {"temperature", 0}}, &status);
      EXPECT_EQ(status, 200);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    after.push_back(timed(brief));
    long_one.join();
  }
  stream.join();
  const uint64_t peak = PeakRssKiB(s.pid());
  std::printf("[ %s ] brief request p50 %.0f ms idle, %.0f ms beside its lookups; stream's worst gap %.0f ms; "
              "RSS idle %llu KiB, peak %llu KiB\n",
              label.c_str(), Median(idle), Median(after), worst_gap.load(), static_cast<unsigned long long>(rss_idle),
              static_cast<unsigned long long>(peak));
  // Bounds with room for a loaded CI machine (the fix's figures are in
  // docs/failure-semantics.md); the old binary missed them by seconds.
  EXPECT_LT(Median(after), 1.5 * Median(idle) + 150);
  EXPECT_LT(worst_gap.load(), 1500);
  EXPECT_LT(peak, 2 * rss_idle);
}

TEST(HostileRedisTest, ALyingOrStallingRedisCostsOnlyItsOwnPromptsAMiss) {
  using Mode = testing::FakeRedis::Mode;
  const std::pair<Mode, const char*> modes[] = {
      {Mode::kDrip, "drip"}, {Mode::kHugeBulk, "1 GB string"}, {Mode::kHugeArray, "2^31 array"}};
  for (const auto& [mode, name] : modes) {
    SCOPED_TRACE(name);
    testing::FakeRedis fake(mode);
    BesideARedis(fake.url(), std::string("hostile redis: ") + name, [] {});
    EXPECT_GE(fake.hostile_replies(), 1);
  }
}

// A real Redis stopped (SIGSTOP) while serving: it accepts connections and
// answers nothing (before: ~0.33 s of a running stream's pace per new prompt).
TEST(HostileRedisTest, AStoppedRedisCostsOnlyItsOwnPromptsAMiss) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  BesideARedis(redis.url(), "redis healthy (the figures to compare with)", [] {});
  BesideARedis(redis.url(), "redis SIGSTOPped", [&] { redis.Signal(SIGSTOP); });
  redis.Signal(SIGCONT);
}

// Issue 57, item 5: a response id was an xxh3 of the request number under a
// 64-bit seed, which a tenant could invert to count others' requests. Ids
// are now 128 random bits: distinct, 32 hex digits, no step between them.
TEST(HostileClientTest, ResponseIdsAreRandomAndCountNothing) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  std::set<std::string> ids;
  std::vector<std::string> hex;
  static const std::regex kId(R"((cmpl|chatcmpl)-([0-9a-f]{32}))");
  for (int i = 0; i < 40; ++i) {
    const bool chat = i % 4 == 3;
    int status = 0;
    const json r = chat ? Post(c, "/v1/chat/completions",
                               json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}}, &status)
                        : Post(c, "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 1}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    const std::string id = r.value("id", "");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(id, m, kId)) << "not a prefix and 32 hex digits: " << id;
    EXPECT_EQ(m[1], chat ? "chatcmpl" : "cmpl") << id;
    ids.insert(id);
    hex.push_back(m[2]);
  }
  EXPECT_EQ(ids.size(), 40u) << "an id repeated";
  // No fixed step between consecutive ids (a counter's), in either half.
  std::set<uint64_t> steps_hi, steps_lo;
  for (size_t i = 1; i < hex.size(); ++i) {
    steps_hi.insert(std::stoull(hex[i].substr(0, 16), nullptr, 16) - std::stoull(hex[i - 1].substr(0, 16), nullptr, 16));
    steps_lo.insert(std::stoull(hex[i].substr(16), nullptr, 16) - std::stoull(hex[i - 1].substr(16), nullptr, 16));
  }
  EXPECT_GT(steps_hi.size(), 30u);
  EXPECT_GT(steps_lo.size(), 30u);
  // Each hex digit is used (a random id's 1,280 digits miss one with
  // probability under 1e-30).
  std::set<char> digits;
  for (const std::string& h : hex) digits.insert(h.begin(), h.end());
  EXPECT_EQ(digits.size(), 16u);
  EXPECT_EQ(srv.Stop(), 0);
}

// Issue 57, item 6: --max-connections sockets from one address (dripping a
// head that never ends) held every worker: /health answered 503 to every
// probe for a minute. One address may hold a quarter of them; more from it
// get 503 at once, counted, and other addresses are served.
TEST(HostileClientTest, OneAddressCannotTakeEveryConnection) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--max-connections", "8"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(std::make_unique<Conn>(srv.port(), "127.0.0.2"));
    ASSERT_TRUE(held.back()->connected());
    held.back()->Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");  // the head never ends
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int refused = 0;
  for (auto& c : held) refused += c->Poll(200).find(" 503 ") != std::string::npos;
  EXPECT_EQ(refused, 6) << "8 from one address with a cap of 2 (a quarter of 8)";
  for (int i = 0; i < 5; ++i) {
    std::string ans;
    const auto t0 = Clock::now();
    EXPECT_EQ(Exchange(srv.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", &ans, 5,
                       "127.0.0.3"), 200) << "/health from another address while one holds its cap: " << ans;
    EXPECT_LT(SecondsSince(t0), 1.0);
  }
  httplib::Client h("127.0.0.1", srv.port());
  EXPECT_GE(At(Metrics(h), "tierkv_http_connections_refused_per_address_total"), 6);
  held.clear();
  EXPECT_EQ(srv.Stop(), 0);
}

// Issue 57, item 6: one key's long generations, queued first, held another
// key's short requests behind all of them (past 20 s). Jobs now start
// round-robin across keys: B's request starts when the first of A's
// running ones ends, long before A's backlog is done.
TEST(HostileClientTest, OneKeysBacklogNeverStarvesAnotherKey) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--api-key", "key-a", "--api-key", "key-b",
                     "--max-running", "2"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  const auto t0 = Clock::now();
  std::vector<double> a_done(8, 0);
  std::vector<std::thread> a;
  for (int i = 0; i < 8; ++i) {
    a.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", srv.port());
      c.set_bearer_token_auth("key-a");
      c.set_read_timeout(120);
      int status = 0;
      Post(c, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 300}, {"ignore_eos", true}},
           &status);
      EXPECT_EQ(status, 200);
      a_done[i] = SecondsSince(t0);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // A's backlog is queued
  httplib::Client b("127.0.0.1", srv.port());
  b.set_bearer_token_auth("key-b");
  b.set_read_timeout(120);
  int status = 0;
  const json r = Post(b, "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 4}}, &status);
  const double b_done = SecondsSince(t0);
  for (auto& t : a) t.join();
  ASSERT_EQ(status, 200) << r.dump();
  const double a_last = *std::max_element(a_done.begin(), a_done.end());
  const double a_first = *std::min_element(a_done.begin(), a_done.end());
  // A's 8 run two at a time: four waves. B's starts after the first.
  EXPECT_LT(b_done, a_first + 0.5 * (a_last - a_first))
      << "B answered at " << b_done << " s; A's first at " << a_first << " s, last at " << a_last << " s";
  EXPECT_EQ(srv.Stop(), 0);
}

// Issue 57, item 6: one key filling the queue left another key nothing but
// 429. A key may hold an equal share of the queue while others wait; past
// it its own requests are refused (or its newest gives up its place), never
// the other key's.
TEST(HostileClientTest, OneKeyCannotFillTheQueueForAnother) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--api-key", "key-a", "--api-key", "key-b",
                     "--max-running", "1", "--max-queue", "4"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  const auto post = [&](const char* key, int tokens) {
    httplib::Client c("127.0.0.1", srv.port());
    c.set_bearer_token_auth(key);
    c.set_read_timeout(120);
    int status = 0;
    Post(c, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", tokens}, {"ignore_eos", true}},
         &status);
    return status;
  };
  // A: 1 running and 4 queued fill the queue; 3 more are refused.
  std::vector<int> a_status(8, 0);
  std::vector<std::thread> a;
  for (int i = 0; i < 8; ++i) {
    a.emplace_back([&, i] { a_status[i] = post("key-a", 150); });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // B: each of its 2 (its share of 4 places between 2 keys) is queued.
  std::vector<int> b_status(2, 0);
  std::vector<std::thread> b;
  for (int i = 0; i < 2; ++i) {
    b.emplace_back([&, i] { b_status[i] = post("key-b", 2); });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  for (auto& t : b) t.join();
  for (auto& t : a) t.join();
  EXPECT_EQ(b_status, std::vector<int>(2, 200)) << "B refused while A held the queue";
  const int a_ok = static_cast<int>(std::count(a_status.begin(), a_status.end(), 200));
  const int a_429 = static_cast<int>(std::count(a_status.begin(), a_status.end(), 429));
  EXPECT_EQ(a_ok + a_429, 8);
  EXPECT_EQ(a_ok, 3) << "1 running and 2 queued (its share) are A's";
  EXPECT_EQ(srv.Stop(), 0);
}

// Issue 57, item 6: 24 requests at once with --max-queue 16 and 8 slots got
// 7 refusals: those arriving while the scheduler was in a prefill counted
// against the queue though slots were free. Queue and slots hold all 24.
TEST(HostileClientTest, ABurstThatFitsSlotsAndQueueIsNeverRefused) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path, "--max-queue", "16", "--max-running", "8"});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  std::string longer = "Once upon a time";
  for (int i = 0; i < 40; ++i) longer += " there was a little cat who lived in a house by the sea";
  for (int round = 0; round < 3; ++round) {
    std::vector<int> status(24, 0);
    std::vector<std::thread> t;
    for (int i = 0; i < 24; ++i) {
      t.emplace_back([&, i] {
        httplib::Client c("127.0.0.1", srv.port());
        c.set_read_timeout(120);
        // Each its own prompt: every start is a prefill of its own.
        Post(c, "/v1/completions",
             json{{"prompt", std::to_string(round * 100 + i) + longer}, {"max_tokens", 8}, {"ignore_eos", true}},
             &status[i]);
      });
    }
    for (auto& th : t) th.join();
    EXPECT_EQ(std::count(status.begin(), status.end(), 200), 24) << "round " << round << ": " << [&] {
      std::string s;
      for (int x : status) s += std::to_string(x) + " ";
      return s;
    }();
  }
  EXPECT_EQ(srv.Stop(), 0);
}

// Issue 57, item 8: an admin token equal to an API key made that key's
// holder the operator; a key with a control character or over 4 KiB could
// never authenticate. Each stops the server at start, naming the key by its
// place, never printing it.
TEST(HostileClientTest, CredentialsThatCannotWorkOrLeakStopTheStart) {
  TempDir dir;
  const std::string long_key(5000, 'k');
  struct Case {
    std::vector<std::string> args, env;
    std::string says, secret;
  };
  const std::vector<Case> cases = {
      {{"--api-key", "key-one", "--api-key", "key-two", "--admin-token", "key-two"}, {}, "equals API key 2", "key-two"},
      {{"--api-key", "key-one"}, {"TIERKV_ADMIN_TOKEN=key-one"}, "equals API key 1", "key-one"},
      {{"--api-key", "key-one"}, {"TIERKV_API_KEYS=ok-key,bad\x01key"}, "key 3: byte 4", "bad\x01key"},
      {{"--api-key", long_key}, {}, "key 1: is 5000 bytes", long_key},
      {{"--api-key", "key-one", "--admin-token", "adm\x7f"}, {}, "admin_token: byte 4", "adm\x7f"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string err = dir.path + "/err" + std::to_string(i);
    std::vector<std::string> args = {"--port", "0", "--cache-dir", dir.path + "/c"};
    args.insert(args.end(), cases[i].args.begin(), cases[i].args.end());
    ServerProcess srv(args, cases[i].env, err);
    EXPECT_EQ(srv.port(), -1) << "case " << i << " started: " << srv.first_line();
    EXPECT_EQ(srv.Stop(), 1) << "case " << i;
    std::ifstream in(err);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(cases[i].says), std::string::npos) << "case " << i << ": " << text.substr(0, 300);
    EXPECT_EQ(text.find(cases[i].secret), std::string::npos) << "case " << i << " printed the secret";
  }
}

// Issue 57, item 9: `logprobs: 0` on /v1/completions was taken as its
// default and silently ignored (0 asks for the chosen token's probability).
// Any value of completions' logprobs, chat's logprobs true, and any
// top_logprobs are refused naming the field; chat's false and null pass.
TEST(HostileClientTest, LogprobsOfAnyValueAreRefusedNamingTheField) {
  TempDir dir;
  ServerProcess srv({"--port", "0", "--cache-dir", dir.path});
  ASSERT_GT(srv.port(), 0) << srv.first_line();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  const json prompt{{"prompt", "Once"}, {"max_tokens", 1}};
  const json chat{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}};
  const auto with = [](json body, const char* field, const json& v) {
    body[field] = v;
    return body;
  };
  struct Case {
    const char* path;
    json body;
    int status;
    const char* param;  // the refusal's
  };
  const std::vector<Case> cases = {
      {"/v1/completions", with(prompt, "logprobs", 0), 400, "logprobs"},
      {"/v1/completions", with(prompt, "logprobs", 2), 400, "logprobs"},
      {"/v1/completions", with(prompt, "logprobs", false), 400, "logprobs"},
      {"/v1/completions", with(prompt, "top_logprobs", 0), 400, "top_logprobs"},
      {"/v1/completions", with(prompt, "logprobs", nullptr), 200, ""},
      {"/v1/chat/completions", with(chat, "logprobs", true), 400, "logprobs"},
      {"/v1/chat/completions", with(chat, "logprobs", 0), 400, "logprobs"},
      {"/v1/chat/completions", with(chat, "top_logprobs", 0), 400, "top_logprobs"},
      {"/v1/chat/completions", with(chat, "logprobs", false), 200, ""},
      {"/v1/chat/completions", with(chat, "logprobs", nullptr), 200, ""},
  };
  for (const Case& k : cases) {
    int status = 0;
    const json r = Post(c, k.path, k.body, &status);
    EXPECT_EQ(status, k.status) << k.path << " " << k.body.dump() << ": " << r.dump();
    if (k.status == 400) {
      EXPECT_EQ(r["error"].value("param", ""), k.param) << r.dump();
    }
  }
  EXPECT_EQ(srv.Stop(), 0);
}


// A file system of its own for a cache directory (a loop-mounted ext4
// image), frozen and thawed with fsfreeze: a disk that stops answering
// writes. ok() false, with why(), where that cannot be done here (not
// root, no loop devices, no fsfreeze): the test skips. A watchdog thaws it
// 45 s after a freeze whatever happens to the test.
class FrozenDisk {
 public:
  FrozenDisk() {
    char tmpl[] = "/tmp/tierkv-frozen-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const std::string cmd = "truncate -s 192M " + dir_ + ".img && mkfs.ext4 -q -F " + dir_ +
                            ".img && mount -o loop " + dir_ + ".img " + dir_ + " 2>&1";
    ok_ = ::geteuid() == 0 && std::system("command -v fsfreeze >/dev/null 2>&1") == 0 && RunCommand(cmd, &why_) == 0;
    if (::geteuid() != 0) why_ = "not root";
    mounted_ = ok_;
  }
  ~FrozenDisk() {
    Thaw();
    if (mounted_) std::system(("umount -l " + dir_ + " 2>/dev/null").c_str());
    std::system(("rm -rf " + dir_ + " " + dir_ + ".img").c_str());
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string path() const { return dir_ + "/cache"; }
  void Freeze() {
    std::system(("(sleep 45; fsfreeze -u " + dir_ + " 2>/dev/null) >/dev/null 2>&1 &").c_str());
    frozen_ = std::system(("fsfreeze -f " + dir_).c_str()) == 0;
  }
  void Thaw() {
    if (frozen_) std::system(("fsfreeze -u " + dir_).c_str());
    frozen_ = false;
  }

 private:
  std::string dir_, why_;
  bool ok_ = false, mounted_ = false, frozen_ = false;
};

// Issue 57 (4): with the store's file system frozen, a fully cached prompt
// took 23 s, a 2-token request 20 s, and /health said 200 "ok": stores ran
// on the scheduler thread. Now a server's prompts are stored behind their
// requests by the store writer, which holds the hung write alone; requests
// that need no store write keep their latency, a prompt stored meanwhile is
// dropped (counted), and /health says the store is stalled.
TEST(HostileDiskTest, AFrozenStoreFileSystemStallsNoRequestAndHealthSaysSo) {
  FrozenDisk disk;
  if (!disk.ok()) GTEST_SKIP() << "cannot freeze a file system here: " << disk.why();
  ServerProcess s({"--port", "0", "--cache-dir", disk.path()});
  ASSERT_GT(s.port(), 0) << s.first_line();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(60);
  const json brief{{"prompt", "Once upon a time"}, {"max_tokens", 2}, {"temperature", 0}};
  const json cached{{"prompt", std::string(kPrefix) + " The end."}, {"max_tokens", 2}, {"temperature", 0}};
  const auto timed = [&](const json& body) {
    const auto t0 = Clock::now();
    int status = 0;
    Post(c, "/v1/completions", body, &status);
    EXPECT_EQ(status, 200);
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  timed(cached);  // stored
  std::vector<double> idle_brief, idle_cached;
  for (int i = 0; i < 5; ++i) {
    idle_brief.push_back(timed(brief));
    idle_cached.push_back(timed(cached));
  }
  disk.Freeze();
  // A new long prompt: its store hangs on the frozen disk (before the fix:
  // and the request with it, until the watchdog thawed the disk at 45 s).
  const double first = timed(json{{"prompt", std::string(kPrefix) + " Another ending."}, {"max_tokens", 2}});
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_NE(health->body.find("degraded"), std::string::npos) << health->body;
  EXPECT_NE(health->body.find("has not finished"), std::string::npos) << health->body;
  std::vector<double> frozen_brief, frozen_cached;
  for (int i = 0; i < 5; ++i) {
    frozen_brief.push_back(timed(brief));
    frozen_cached.push_back(timed(cached));
  }
  // Another new prompt while frozen: answered; its store is dropped.
  const double fresh = timed(json{{"prompt", std::string(kPrefix) + " A third ending."}, {"max_tokens", 2}});
  disk.Thaw();
  std::printf("[ frozen disk ] brief p50 %.0f ms idle, %.0f ms frozen; cached prompt p50 %.0f ms idle, %.0f ms "
              "frozen; new prompts while frozen %.0f and %.0f ms; /health: %s\n",
              Median(idle_brief), Median(frozen_brief), Median(idle_cached), Median(frozen_cached), first, fresh,
              health->body.c_str());
  EXPECT_LT(Median(frozen_brief), 1.5 * Median(idle_brief) + 100);
  EXPECT_LT(Median(frozen_cached), 1.5 * Median(idle_cached) + 100);
  EXPECT_LT(first, 10000);
  EXPECT_LT(fresh, 10000);
  // Thawed: the hung write finishes and /health is ok again.
  bool ok_again = false;
  for (int i = 0; i < 50 && !ok_again; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto h = c.Get("/health");
    ok_again = h && h->body.find("\"ok\"") != std::string::npos;
  }
  EXPECT_TRUE(ok_again);
}

}  // namespace
}  // namespace tierkv
