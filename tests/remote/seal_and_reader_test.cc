// Review of issue 57's sealed values and Redis reader (branch t57-review).
// Tests named  reproduce a problem found in review: they assert
// the behaviour wanted and fail today (run them with
// --gtest_also_run_disabled_tests). The others pin down attacks checked
// and found handled.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "remote/redis_conn.h"
#include "remote/seal.h"
#include "store/format.h"
#include "testing/fake_redis.h"

namespace tierkv::remote {
namespace {

using std::chrono::milliseconds;

constexpr uint32_t kPages = 3;
const std::string kKey = "0123456789abcdef0123456789abcdef";

std::string Record() {
  std::string r(store::kBlockSize * (1 + kPages), '\0');
  for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<char>(i * 31 + 7);
  return r;
}

Sealer Make(std::vector<std::string> keys) {
  auto s = Sealer::FromKeys(std::move(keys));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::string KeyFile(const std::string& content) {
  char tmpl[] = "/tmp/tierkv_review_key_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ::close(fd);
  std::ofstream(tmpl, std::ios::binary) << content;
  ::chmod(tmpl, 0600);
  return tmpl;
}

// --- seals: attacks that are handled --------------------------------------

TEST(SealTest, ForgedTruncatedPaddedAndCopiedValuesAreRejected) {
  const Sealer s = Make({kKey});
  const std::string name = "tierkv:{a}:1:0";
  std::string sealed = Record();
  s.Seal(name, &sealed);
  ASSERT_EQ(sealed.size(), Record().size() + Sealer::SealBytes(kPages));
  std::string why;
  {
    std::string v = sealed;
    EXPECT_EQ(s.OpenWhole(name, kPages, &v, &why), SealCheck::kOk);
    EXPECT_EQ(v, Record());
  }
  {  // one byte short, one byte long
    std::string v = sealed.substr(0, sealed.size() - 1);
    EXPECT_EQ(s.OpenWhole(name, kPages, &v, &why), SealCheck::kForged);
    v = sealed + "x";
    EXPECT_EQ(s.OpenWhole(name, kPages, &v, &why), SealCheck::kForged);
  }
  {  // another key's name
    std::string v = sealed;
    EXPECT_EQ(s.OpenWhole("tierkv:{a}:1:1", kPages, &v, &why), SealCheck::kForged);
  }
  {  // a payload byte, a header byte, the MAC, a digest
    for (size_t at : {size_t{store::kBlockSize} * 2 + 5, size_t{9}, sealed.size() - 1, Record().size() + 20}) {
      std::string v = sealed;
      v[at] ^= 1;
      EXPECT_EQ(s.OpenWhole(name, kPages, &v, &why), SealCheck::kForged) << at;
    }
  }
  {  // a seal of the right length but garbage: no magic, a miss
    std::string v = Record() + std::string(Sealer::SealBytes(kPages), 'g');
    EXPECT_EQ(s.OpenWhole(name, kPages, &v, &why), SealCheck::kUnsealed);
  }
  {  // our magic and key id, garbage after: forged
    std::string v = sealed;
    for (size_t i = Record().size() + 16; i < v.size(); ++i) v[i] = 'g';
    EXPECT_EQ(s.OpenWhole(name, kPages, &v, &why), SealCheck::kForged);
  }
  {  // another deployment's key: a miss; a rotated key still opens
    const Sealer other = Make({"ffffffffffffffffffffffffffffffff"});
    std::string v = sealed;
    EXPECT_EQ(other.OpenWhole(name, kPages, &v, &why), SealCheck::kUnsealed);
    const Sealer rotated = Make({"ffffffffffffffffffffffffffffffff", kKey});
    v = sealed;
    EXPECT_EQ(rotated.OpenWhole(name, kPages, &v, &why), SealCheck::kOk);
  }
  {  // parts: an empty or short seal range, a page out of the seal's range
    const std::string_view seal = std::string_view(sealed).substr(Record().size());
    const std::string_view block0 = std::string_view(sealed).substr(0, store::kBlockSize);
    EXPECT_EQ(s.CheckHeader(name, block0, "", &why), SealCheck::kUnsealed);
    EXPECT_EQ(s.CheckHeader(name, block0, seal.substr(0, seal.size() - 1), &why), SealCheck::kUnsealed);
    EXPECT_EQ(s.CheckHeader(name, block0, seal, &why), SealCheck::kOk);
    EXPECT_FALSE(Sealer::PageOk(seal, kPages, std::string_view(sealed).substr(0, store::kBlockSize)));
    EXPECT_TRUE(Sealer::PageOk(seal, 1, std::string_view(sealed).substr(2 * store::kBlockSize, store::kBlockSize)));
  }
}

TEST(SealTest, KeyFileWithCrlfAndSpacesMatchesTheBareKey) {
  const std::string f = KeyFile("# rotation\r\n  " + kKey + " \t\r\n\r\n");
  auto a = Sealer::Load(f);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const Sealer b = Make({kKey});
  std::string v = Record();
  a->Seal("n", &v);
  std::string why;
  EXPECT_EQ(b.OpenWhole("n", kPages, &v, &why), SealCheck::kOk) << why;
  ::unlink(f.c_str());
}

// FINDING: $TIERKV_REMOTE_KEY is trimmed of " \t\r" only (seal.cc Trim), so
// a key put in the environment from a file or a Kubernetes secret with its
// trailing newline is another key than the same file given with
// --remote-key-file (getline drops the '\n'): servers of one deployment
// configured the two ways silently miss on each other's values (counted as
// "unsealed", never logged).
TEST(SealTest, EnvKeyWithTrailingNewlineIsTheKeyFilesKey) {
  const std::string f = KeyFile(kKey + "\n");
  ::setenv(kRemoteKeyEnv, (kKey + "\n").c_str(), 1);
  auto from_env = Sealer::Load("");
  ::unsetenv(kRemoteKeyEnv);
  auto from_file = Sealer::Load(f);
  ::unlink(f.c_str());
  ASSERT_TRUE(from_env.ok() && from_file.ok());
  std::string v = Record();
  from_env->Seal("n", &v);
  std::string why;
  EXPECT_EQ(from_file->OpenWhole("n", kPages, &v, &why), SealCheck::kOk) << why;
}

// --- the Redis reader against a scripted server ----------------------------

// A server answering PING as Redis does and then every other command with
// the next of `script` (raw bytes); an empty entry closes the connection.
class ScriptedRedis {
 public:
  explicit ScriptedRedis(std::vector<std::string> script) : script_(std::move(script)) {
    fd_ = testing::ListenOnLoopback(&port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~ScriptedRedis() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  void Send(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void Run() {
    size_t next = 0;
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string buf;
      char tmp[4096];
      bool open = true;
      while (open && !stop_) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 20) <= 0) continue;
        const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
        if (n <= 0) break;
        buf.append(tmp, static_cast<size_t>(n));
        // Commands are "*<argc>\r\n" then argc bulk strings: count the '*' lines.
        for (;;) {
          const size_t e = buf.find("\r\n");
          if (e == std::string::npos || buf[0] != '*') break;
          const size_t argc = std::stoul(buf.substr(1, e - 1));
          size_t pos = e + 2;
          std::string name;
          bool whole = true;
          for (size_t i = 0; i < argc && whole; ++i) {
            const size_t le = buf.find("\r\n", pos);
            if (le == std::string::npos) { whole = false; break; }
            const size_t len = std::stoul(buf.substr(pos + 1, le - pos - 1));
            if (buf.size() < le + 2 + len + 2) { whole = false; break; }
            if (i == 0) name = buf.substr(le + 2, len);
            pos = le + 2 + len + 2;
          }
          if (!whole) break;
          buf.erase(0, pos);
          if (name == "PING") {
            Send(c, "+PONG\r\n");
            continue;
          }
          const std::string reply = next < script_.size() ? script_[next++] : "";
          if (reply.empty()) {
            open = false;
            break;
          }
          Send(c, reply);
        }
      }
      ::close(c);
    }
  }

  std::vector<std::string> script_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Handled: a reply cut off by a close, arrays nested past hiredis's depth
// or past the element budget (the partial root freed with the reader), and
// a reply exactly at the byte cap (one byte more is refused).
TEST(RedisConnAttackTest, PartialRepliesNestingAndTheByteCap) {
  const std::vector<Command> get = {{"GET", "k"}};
  std::vector<Reply> r;
  ErrorKind kind;
  {
    ScriptedRedis s({"$10\r\nabc"});  // then the script ends: closed
    RedisConn c({"127.0.0.1", s.port()}, milliseconds(300));
    // The partial reply is sent, then the next command (none) closes: the
    // client waits for the rest and sees the close or its deadline.
    const Status st = c.Pipeline(get, &r, &kind);
    EXPECT_FALSE(st.ok());
    EXPECT_TRUE(kind == ErrorKind::kTimeout || kind == ErrorKind::kClosed) << st.ToString();
  }
  {
    std::string deep;
    for (int i = 0; i < 9; ++i) deep += "*1\r\n";
    deep += ":1\r\n";
    ScriptedRedis s({deep});
    RedisConn c({"127.0.0.1", s.port()}, milliseconds(300));
    EXPECT_FALSE(c.Pipeline(get, &r, &kind).ok());
    EXPECT_EQ(kind, ErrorKind::kProtocol);
  }
  {
    std::string nested = "*2\r\n*40000\r\n";
    for (int i = 0; i < 40000; ++i) nested += ":1\r\n";
    nested += "*40000\r\n";
    ScriptedRedis s({nested});
    RedisConn c({"127.0.0.1", s.port()}, milliseconds(300));
    const Status st = c.Pipeline(get, &r, &kind);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(kind, ErrorKind::kProtocol) << st.ToString();
  }
  for (const int extra : {0, 1}) {
    const ReplyLimits limits{1000, 1u << 16};
    const uint64_t cap = 1 * limits.bytes_per_command + (64u << 10);
    // "$<n>\r\n" + n bytes + "\r\n" == cap (+ extra)
    size_t n = cap - 4;
    n -= std::to_string(n).size() + 1;  // "$" + digits + "\r\n" + "\r\n"
    n += static_cast<size_t>(extra);
    const std::string reply = "$" + std::to_string(n) + "\r\n" + std::string(n, 'v') + "\r\n";
    ASSERT_EQ(reply.size(), cap + static_cast<size_t>(extra));
    ScriptedRedis s({reply, ":1\r\n"});
    RedisConn c({"127.0.0.1", s.port()}, milliseconds(500), {}, limits);
    const Status st = c.Pipeline(get, &r, &kind);
    if (extra == 0) {
      EXPECT_TRUE(st.ok()) << st.ToString();
    } else {
      EXPECT_EQ(kind, ErrorKind::kProtocol) << st.ToString();
    }
  }
}

// FINDING: bytes a server sends past a pipeline's last reply stay in the
// reader and become the first reply of the next pipeline (redis_conn.cc
// Exchange returns as soon as it has commands.size() replies without
// checking that the reader is empty): replies shift by one for the rest of
// the connection. A partial extra reply also leaves hiredis tasks whose
// privdata points at the previous Exchange's stack Budget.
TEST(RedisConnAttackTest, BytesPastTheLastReplyAreNotTheNextPipelinesReply) {
  ScriptedRedis s({"$1\r\na\r\n$1\r\nz\r\n", "$1\r\nb\r\n"});
  RedisConn c({"127.0.0.1", s.port()}, milliseconds(300));
  std::vector<Reply> r;
  ErrorKind kind;
  const std::vector<Command> get_a = {{"GET", "a"}}, get_b = {{"GET", "b"}};
  const Status first = c.Pipeline(get_a, &r, &kind);
  const Status second = c.Pipeline(get_b, &r, &kind);
  // Either the first pipeline fails (a server sending more than asked is
  // lying) or the second gets its own reply; never the stale "z".
  if (first.ok() && second.ok()) {
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].str, "b");
  }
}

}  // namespace
}  // namespace tierkv::remote
