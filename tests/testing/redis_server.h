// Real Redis servers for tests: Debian's redis-server started on a free
// loopback port in a temporary directory (no persistence), and a
// three-master Redis Cluster made with redis-cli --cluster create. Tests
// skip with a message where redis-server is absent (CI installs it).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "testing/shell.h"

namespace tierkv::testing {

inline bool HaveRedis() {
  return std::system("command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1") == 0;
}

#define TIERKV_SKIP_WITHOUT_REDIS()                                                        \
  do {                                                                                     \
    if (!::tierkv::testing::HaveRedis()) {                                                 \
      GTEST_SKIP() << "redis-server and redis-cli are not installed (Debian's redis-server " \
                      "package; CI installs it): the remote tier's tests need a real Redis"; \
    }                                                                                      \
  } while (0)

// Whether a loopback port can be bound now (0: any; *port gets the one bound).
inline bool Bindable(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(*port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  *port = ntohs(a.sin_port);
  return ok;
}

// A port nobody listens on now, whose cluster bus port (port + 10000, as
// redis-server uses) is free too.
inline int FreePort() {
  for (;;) {
    int port = 0;
    if (!Bindable(&port) || port + 10000 > 65535) continue;
    int bus = port + 10000;
    if (Bindable(&bus)) return port;
  }
}

// One redis-server process; killed when this goes away.
class RedisServer {
 public:
  // `extra`: more arguments, e.g. {"--cluster-enabled", "yes"}.
  explicit RedisServer(std::vector<std::string> extra = {}, int port = 0) : extra_(std::move(extra)) {
    port_ = port != 0 ? port : FreePort();
    char tmpl[] = "/tmp/tierkv-redis-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    Start();
  }
  ~RedisServer() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  const std::string& dir() const { return dir_; }

  // Starts it again (same port, same directory) after Kill or Stop.
  void Start() {
    std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                     "--dir", dir_, "--save", "", "--appendonly", "no",
                                     "--daemonize", "no", "--protected-mode", "no",
                                     "--logfile", dir_ + "/redis.log", "--enable-debug-command", "local"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      if (Cli("PING") == "PONG\n") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ADD_FAILURE() << "redis-server on port " << port_ << " did not answer PING";
  }
  // SIGKILL (a crash) or SIGTERM (a clean stop), and waits.
  void Kill(int sig = SIGKILL) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // A redis-cli command against this server; its output.
  std::string Cli(const std::string& args) const {
    std::string out;
    Shell("redis-cli -p " + std::to_string(port_) + " " + args + " 2>&1", &out);
    return out;
  }

 private:
  std::vector<std::string> extra_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::string dir_;
};

// Three masters, every slot assigned, no replicas.
class RedisCluster {
 public:
  RedisCluster() {
    std::string hosts;
    for (int i = 0; i < 3; ++i) {
      nodes_.push_back(std::make_unique<RedisServer>(std::vector<std::string>{
          "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}));
      hosts += " 127.0.0.1:" + std::to_string(nodes_.back()->port());
    }
    std::string out;
    const int rc = Shell("redis-cli --cluster create" + hosts + " --cluster-replicas 0 --cluster-yes 2>&1", &out);
    EXPECT_EQ(rc, 0) << out;
    for (int i = 0; i < 200 && !Ok(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(Ok()) << "the cluster did not reach cluster_state:ok";
  }
  bool Ok() const {
    for (const auto& n : nodes_) {
      if (n->Cli("CLUSTER INFO").find("cluster_state:ok") == std::string::npos) return false;
    }
    return true;
  }
  std::string url() const {
    return "redis-cluster://127.0.0.1:" + std::to_string(nodes_[0]->port()) + ",127.0.0.1:" +
           std::to_string(nodes_[1]->port());
  }
  RedisServer& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  std::string NodeId(int i) const {
    std::string id = nodes_[static_cast<size_t>(i)]->Cli("CLUSTER MYID");
    while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
    return id;
  }
  // Moves `slots` slots (with their keys) from node `from` to node `to`.
  void Reshard(int from, int to, int slots) {
    std::string out;
    const int rc = Shell("redis-cli --cluster reshard 127.0.0.1:" + std::to_string(nodes_[0]->port()) +
                             " --cluster-from " + NodeId(from) + " --cluster-to " + NodeId(to) +
                             " --cluster-slots " + std::to_string(slots) + " --cluster-yes 2>&1",
                         &out);
    EXPECT_EQ(rc, 0) << out;
    for (int i = 0; i < 200 && !Ok(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace tierkv::testing
