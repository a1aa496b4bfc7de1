// Helpers of the server's black-box tests: the real `tierkv serve` binary
// as a child process, a scratch directory, /metrics parsed strictly, and a
// client on a plain socket (for what an HTTP library will not send).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
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
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace tierkv::serve_testing {

using nlohmann::json;

// One `tierkv serve` process; SIGTERM and reaped when it goes away.
// `env`: NAME=VALUE pairs added to its environment; `stderr_path`: where its
// standard error goes (default: the test's).
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> args, std::vector<std::string> env = {},
                         const std::string& stderr_path = "") {
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::close(out[1]);
      if (!stderr_path.empty()) {
        const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) ::dup2(fd, 2);
      }
      for (std::string& e : env) ::putenv(e.data());
      std::vector<char*> argv;
      // $TIERKV_SERVE_BINARY: another build's binary (to see a test fail on
      // the code before a fix).
      const char* other = std::getenv("TIERKV_SERVE_BINARY");
      static std::string bin = other && *other ? other : TIERKV_BINARY, serve = "serve";
      argv.push_back(bin.data());
      argv.push_back(serve.data());
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    stdout_ = ::fdopen(out[0], "r");
    char line[1024];
    if (stdout_ && std::fgets(line, sizeof line, stdout_)) {
      first_line_ = line;
      std::smatch m;
      static const std::regex kPort(R"(http://[^:]+:(\d+))");
      if (std::regex_search(first_line_, m, kPort)) port_ = std::stoi(m[1]);
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !reaped_) Stop();
    if (stdout_) std::fclose(stdout_);
  }
  int port() const { return port_; }
  const std::string& first_line() const { return first_line_; }
  // SIGTERM, then the exit code (128 + signal if killed). A server that has
  // not ended two minutes later fails the test and is killed (SIGKILL: 137),
  // rather than holding the test until ctest's timeout.
  int Stop() {
    ::kill(pid_, SIGTERM);
    return Wait();
  }
  // The exit code once the process ends by itself (after a signal the test
  // sent: a second SIGTERM would end a draining server at once, 143).
  int Wait() {
    int st = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (::waitpid(pid_, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "tierkv serve (pid " << pid_ << ") did not end within 2 minutes of SIGTERM";
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    reaped_ = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  FILE* stdout_ = nullptr;
  std::string first_line_;
  int port_ = -1;
};

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/var/tmp/tierkv_serve_XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// Prometheus' text format, parsed strictly: every sample line is
// `name{labels} value` of a metric whose TYPE came before. Keys: the sample
// as written before the value.
inline std::map<std::string, double> ParsePrometheus(const std::string& text) {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  static const std::regex kType(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})? ([-+0-9.eE]+|NaN|\+Inf|-Inf))");
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (std::regex_match(line, m, kType)) {
      types[m[1]] = m[2];
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, m, kSample)) << "not a sample line: " << line;
    if (m.empty()) continue;
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (!types.count(family) && family.size() > s.size() && family.ends_with(s)) {
        family.resize(family.size() - s.size());
      }
    }
    EXPECT_TRUE(types.count(family)) << "no TYPE before " << line;
    samples[line.substr(0, line.rfind(' '))] = std::stod(m[4]);
  }
  return samples;
}

inline json Post(httplib::Client& c, const std::string& path, const json& body, int* status = nullptr) {
  auto r = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response from " << path;
  if (!r) return json();
  if (status) *status = r->status;
  return json::parse(r->body, nullptr, false);
}

inline std::map<std::string, double> Metrics(httplib::Client& c) {
  auto r = c.Get("/metrics");
  EXPECT_TRUE(r && r->status == 200);
  return r ? ParsePrometheus(r->body) : std::map<std::string, double>{};
}

// Runs a shell command; its standard output in *out, its wait status.
inline int RunCommand(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out->append(buf, n);
  return ::pclose(p);
}

// A story prefix long enough to fill several 64-token chunks.
inline const char* kPrefix =
    "Once upon a time there was a little girl named Lily who lived in a small house near the "
    "woods with her mother, her father and a big brown dog called Max. Every morning Lily and "
    "Max walked to the river to look at the fish, and every evening her mother told her a story "
    "about the stars. One day Lily found a shiny red ball under a tree. She picked it up and ";

// A client on a plain socket, so that a test can hang up mid-request.
// A client on a plain socket, so that a test can hang up mid-request.
class RawClient {
 public:
  RawClient(int port, const std::string& path, const std::string& body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    const std::string req = "POST " + path +
                            " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    sent_ = ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  ~RawClient() { Close(); }
  bool sent() const { return sent_; }
  // Reads until `what` has arrived (true) or the peer closed or 60 s passed.
  bool ReadUntil(const std::string& what) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (got_.find(what) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      got_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool sent_ = false;
  std::string got_;
};

// Polls /metrics until `done` holds of it (at most 60 s); whether it did.
template <typename Pred>
inline bool AwaitMetrics(httplib::Client& c, Pred done) {
  for (int i = 0; i < 600; ++i) {
    if (done(Metrics(c))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

inline double At(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? -1 : it->second;
}

// One request runs, one waits, the next is refused with 429 and Retry-After;

}  // namespace tierkv::serve_testing
