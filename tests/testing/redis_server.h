// Real Redis servers for tests: Debian's redis-server started on a free
// loopback port in a temporary directory (no persistence), and a
// three-master Redis Cluster made with redis-cli --cluster create; and a
// server on a TLS port only (TlsCerts: a CA and a certificate for
// 127.0.0.1 made with the openssl command). Tests skip with a message where
// redis-server is absent (CI installs it) or refuses TLS.
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

// A test CA and a server certificate it signed for 127.0.0.1 (its
// subjectAltName: IP:127.0.0.1), PEM files made by the openssl command in a
// temporary directory (removed when this goes away). ok() false, with
// why(), where the openssl command is missing or fails.
class TlsCerts {
 public:
  TlsCerts() {
    char tmpl[] = "/tmp/tierkv-tls-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const std::string d = dir_ + "/";
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string cmd =
        "cd " + d + " && (openssl req -x509" + key + " -keyout ca.key -out ca.crt -days 2 -subj '/CN=tierkv test CA'" +
        " && openssl req -new" + key + " -keyout server.key -out server.csr -subj '/CN=127.0.0.1'" +
        " && printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext" +
        " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2"
        " -extfile san.ext) 2>&1";
    ok_ = Shell(cmd, &why_) == 0;
  }
  ~TlsCerts() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TlsCerts(const TlsCerts&) = delete;
  TlsCerts& operator=(const TlsCerts&) = delete;
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string ca() const { return dir_ + "/ca.crt"; }
  std::string cert() const { return dir_ + "/server.crt"; }
  std::string key() const { return dir_ + "/server.key"; }

 private:
  std::string dir_, why_;
  bool ok_ = false;
};

// The servers' shared key of the tests' remote tiers (src/remote/seal.h): a
// remote tier opens only with one. Set in the environment (not overriding
// one given) when a RedisServer starts, so that engines and the tierkv
// processes the tests start share it; a test of a missing or another key
// sets its own.
inline constexpr const char* kTestRemoteKey = "tierkv-tests-shared-key-0123456789abcdef";
inline void EnsureTestRemoteKey() { ::setenv("TIERKV_REMOTE_KEY", kTestRemoteKey, /*overwrite=*/0); }

// One redis-server process; killed when this goes away.
class RedisServer {
 public:
  // `extra`: more arguments, e.g. {"--cluster-enabled", "yes"}.
  explicit RedisServer(std::vector<std::string> extra = {}, int port = 0) : extra_(std::move(extra)) {
    EnsureTestRemoteKey();
    port_ = port != 0 ? port : FreePort();
    char tmpl[] = "/tmp/tierkv-redis-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    Start();
  }
  // On a TLS port only (--port 0: nothing in clear text), with `certs`'
  // server certificate; clients need not present one (--tls-auth-clients
  // no). started() false (and no test failure) where redis-server refuses
  // TLS: the caller skips, quoting log().
  RedisServer(const TlsCerts& certs, std::vector<std::string> extra = {})
      : extra_(std::move(extra)), tls_ca_(certs.ca()) {
    EnsureTestRemoteKey();
    port_ = FreePort();
    char tmpl[] = "/tmp/tierkv-redis-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    extra_.insert(extra_.end(), {"--tls-port", std::to_string(port_), "--tls-cert-file", certs.cert(),
                                 "--tls-key-file", certs.key(), "--tls-ca-cert-file", certs.ca(),
                                 "--tls-auth-clients", "no"});
    Start(/*expect=*/false);
  }
  ~RedisServer() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return (tls_ca_.empty() ? "redis://127.0.0.1:" : "rediss://127.0.0.1:") + std::to_string(port_); }
  bool started() const { return started_; }
  // Its log file's text (why a server did not start).
  std::string log() const {
    std::string out;
    Shell("tail -n 20 " + dir_ + "/redis.log 2>&1", &out);
    return out;
  }
  const std::string& dir() const { return dir_; }

  // Starts it again (same port, same directory) after Kill or Stop.
  // `expect`: a server that does not answer is a test failure (else only started() false).
  void Start(bool expect = true) {
    const std::string plain = tls_ca_.empty() ? std::to_string(port_) : "0";
    std::vector<std::string> args = {"redis-server", "--port", plain, "--bind", "127.0.0.1",
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
      started_ = Cli("PING") == "PONG\n";
      if (started_) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // it exited: refused its arguments
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    if (expect) ADD_FAILURE() << "redis-server on port " << port_ << " did not answer PING: " << log();
  }
  // SIGKILL (a crash) or SIGTERM (a clean stop), and waits.
  void Kill(int sig = SIGKILL) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Sends `sig` (SIGSTOP: a hung server; SIGCONT) without waiting.
  void Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // A redis-cli command against this server; its output.
  std::string Cli(const std::string& args) const {
    std::string out;
    const std::string tls = tls_ca_.empty() ? "" : "--tls --cacert " + tls_ca_ + " ";
    Shell("redis-cli " + tls + "-h 127.0.0.1 -p " + std::to_string(port_) + " " + args + " 2>&1", &out);
    return out;
  }

 private:
  std::vector<std::string> extra_;
  std::string tls_ca_;  // TLS only: the CA redis-cli verifies it with
  int port_ = 0;
  pid_t pid_ = -1;
  std::string dir_;
  bool started_ = false;
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
