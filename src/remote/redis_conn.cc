#include "remote/redis_conn.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace tierkv::remote {
namespace {

// hiredis's object factory, building Reply objects in place (a child in its
// parent's elements), so that a reply is held once. It refuses an array
// past the pipeline's element budget before anything of it is allocated
// (hiredis's own factory callocs the announced count: 16 GiB for
// "*2147483647"); the reader then fails, and the connection with it.
struct Budget {
  uint64_t elements_left = 0;
  std::string refused;  // why the factory refused, for the error
};

Reply* Place(const redisReadTask* t) {
  if (t->parent == nullptr) return new Reply();
  Reply* parent = static_cast<Reply*>(t->parent->obj);
  return &parent->elements[static_cast<size_t>(t->idx)];
}

void* CreateString(const redisReadTask* t, char* str, size_t len) {
  Reply* r = Place(t);
  r->type = t->type == REDIS_REPLY_ERROR    ? Reply::Type::kError
            : t->type == REDIS_REPLY_STATUS ? Reply::Type::kStatus
                                            : Reply::Type::kString;
  r->str.assign(str, len);
  return r;
}

void* CreateArray(const redisReadTask* t, int elements) {
  auto* budget = static_cast<Budget*>(t->privdata);
  const uint64_t n = static_cast<uint64_t>(std::max(elements, 0));
  if (budget == nullptr || n > budget->elements_left) {
    if (budget != nullptr) budget->refused = "an array of " + std::to_string(n) + " elements (past the limit)";
    return nullptr;
  }
  budget->elements_left -= n;
  Reply* r = Place(t);
  r->type = Reply::Type::kArray;
  r->elements.resize(n);
  return r;
}

void* CreateInteger(const redisReadTask* t, long long v) {
  Reply* r = Place(t);
  r->type = Reply::Type::kInteger;
  r->integer = v;
  return r;
}

void* CreateNil(const redisReadTask* t) {
  Reply* r = Place(t);
  r->type = Reply::Type::kNil;
  return r;
}

// hiredis frees only roots (children live in them).
void FreeObject(void* o) { delete static_cast<Reply*>(o); }

redisReplyObjectFunctions kFactory = {CreateString, CreateArray, CreateInteger, CreateNil, FreeObject};

// hiredis's argv form of `c` (views into it).
void ArgvOf(const Command& c, std::vector<const char*>* argv, std::vector<size_t>* lens) {
  argv->clear();
  lens->clear();
  for (const std::string& a : c) {
    argv->push_back(a.data());
    lens->push_back(a.size());
  }
}

}  // namespace

std::string_view ErrorKindName(ErrorKind k) {
  switch (k) {
    case ErrorKind::kNone: return "none";
    case ErrorKind::kConnect: return "connect";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kClosed: return "closed";
    case ErrorKind::kOom: return "oom";
    case ErrorKind::kReply: return "reply";
    case ErrorKind::kAuth: return "auth";
    case ErrorKind::kProtocol: return "protocol";
    case ErrorKind::kCount: break;
  }
  return "?";
}

ErrorKind KindOfErrorReply(const Reply& r) {
  if (r.str.starts_with("OOM")) return ErrorKind::kOom;
  if (r.str.starts_with("NOAUTH") || r.str.starts_with("WRONGPASS") || r.str.starts_with("NOPERM")) {
    return ErrorKind::kAuth;
  }
  return ErrorKind::kReply;
}

Login Login::Of(const RedisUrl& url, TlsFiles tls_files) {
  return Login{url.user, url.password, url.cluster ? 0 : url.db, url.tls, url.tls ? std::move(tls_files) : TlsFiles{}};
}

RedisConn::RedisConn(Endpoint endpoint, std::chrono::milliseconds timeout, Login login, ReplyLimits limits)
    : endpoint_(std::move(endpoint)), timeout_(timeout), login_(std::move(login)), limits_(limits) {}

RedisConn::~RedisConn() {
  if (reader_ != nullptr) redisReaderFree(reader_);
}

Status RedisConn::Fail(ErrorKind kind, const std::string& what, ErrorKind* out) {
  link_.Close();
  if (reader_ != nullptr) {
    redisReaderFree(reader_);
    reader_ = nullptr;
  }
  backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  // A refused login or database does not heal by waiting: calls during its
  // backoff fail with its kind; after a transport failure, with kConnect.
  backoff_kind_ = kind == ErrorKind::kTimeout || kind == ErrorKind::kClosed || kind == ErrorKind::kProtocol
                      ? ErrorKind::kConnect
                      : kind;
  last_failure_ = what;
  *out = kind;
  return Status::Unavailable("redis " + endpoint_.ToString() + ": " + what);
}

Status RedisConn::Open(Deadline deadline, ErrorKind* kind) {
  LinkError e;
  const Status s = link_.Connect(endpoint_.host, endpoint_.port, login_.tls, login_.tls_files, deadline, &e);
  // A slow connect or handshake is a failed connect.
  if (!s.ok()) return Fail(ErrorKind::kConnect, s.message(), kind);
  reader_ = redisReaderCreateWithFunctions(&kFactory);
  if (reader_ == nullptr) return Fail(ErrorKind::kConnect, "cannot allocate a reply reader", kind);
  return Status::Ok();
}

Status RedisConn::Connect(Deadline deadline, ErrorKind* kind) {
  if (std::chrono::steady_clock::now() < retry_at_) {
    backed_off_ = true;
    *kind = backoff_kind_;
    return Status::Unavailable("redis " + endpoint_.ToString() + ": backing off after: " + last_failure_);
  }
  RETURN_IF_ERROR(Open(deadline, kind));
  // The login, in one round trip: AUTH (never echoed: only Redis's reply
  // is quoted), or a PING without a password (a server wanting one says
  // NOAUTH here, before a large value is sent: Redis drops the connection
  // of an unauthenticated client sending one), then SELECT.
  std::vector<Command> login;
  if (!login_.password.empty()) {
    login.push_back(login_.user.empty() ? Command{"AUTH", login_.password}
                                        : Command{"AUTH", login_.user, login_.password});
  } else {
    login.push_back({"PING"});
  }
  if (login_.db != 0) login.push_back({"SELECT", std::to_string(login_.db)});
  std::vector<Reply> r;
  const std::chrono::milliseconds saved = backoff_;  // a failed login doubles the backoff as a failed connect does
  RETURN_IF_ERROR(Exchange(login, deadline, &r, kind));
  backoff_ = saved;
  if (!login_.password.empty() && r[0].is_error()) {
    return Fail(ErrorKind::kAuth,
                "AUTH" + (login_.user.empty() ? std::string() : " as user '" + login_.user + "'") +
                    " refused: " + r[0].str,
                kind);
  }
  if (login_.password.empty() && r[0].is_error() && r[0].str.starts_with("NOAUTH")) {
    return Fail(ErrorKind::kAuth,
                r[0].str + " (no password given: put it in $" + kRemotePasswordEnv + " or the URL)", kind);
  }
  // Any other error to PING (an ACL user without it, LOADING) is left to the commands.
  const size_t i = 1;
  if (login_.db != 0 && r[i].is_error()) {
    return Fail(KindOfErrorReply(r[i]), "SELECT " + std::to_string(login_.db) + " refused: " + r[i].str, kind);
  }
  backoff_ = std::chrono::milliseconds(0);
  return Status::Ok();
}

Status RedisConn::Pipeline(std::span<const Command> commands, std::vector<Reply>* replies,
                           ErrorKind* kind) {
  *kind = ErrorKind::kNone;
  replies->clear();
  backed_off_ = false;
  const Deadline deadline = std::chrono::steady_clock::now() + timeout_;
  if (!connected()) RETURN_IF_ERROR(Connect(deadline, kind));
  RETURN_IF_ERROR(Exchange(commands, deadline, replies, kind));
  backoff_ = std::chrono::milliseconds(0);
  return Status::Ok();
}

Status RedisConn::Exchange(std::span<const Command> commands, Deadline deadline, std::vector<Reply>* replies,
                           ErrorKind* kind) {
  std::string out;  // every command, formatted by hiredis, sent in one write
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const Command& c : commands) {
    ArgvOf(c, &argv, &lens);
    char* cmd = nullptr;
    const int n = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (n < 0 || cmd == nullptr) return Fail(ErrorKind::kConnect, "cannot format a command", kind);
    out.append(cmd, static_cast<size_t>(n));
    redisFreeCommand(cmd);
  }
  const auto kind_of = [](LinkError e) { return e == LinkError::kTimeout ? ErrorKind::kTimeout : ErrorKind::kClosed; };
  const std::string in_time = " (the whole reply within " + std::to_string(timeout_.count()) + " ms)";
  LinkError e;
  if (Status s = link_.Write(out, deadline, &e); !s.ok()) return Fail(kind_of(e), s.message() + in_time, kind);
  Budget budget{limits_.elements, {}};
  reader_->privdata = &budget;
  const uint64_t cap = commands.size() * limits_.bytes_per_command + (64u << 10);
  uint64_t fed = 0;
  replies->reserve(commands.size());
  char buf[64 * 1024];
  while (replies->size() < commands.size()) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      const std::string why = budget.refused.empty() ? std::string(reader_->errstr) : budget.refused;
      return Fail(ErrorKind::kProtocol, "protocol error: " + why, kind);
    }
    if (raw != nullptr) {
      std::unique_ptr<Reply> r(static_cast<Reply*>(raw));
      replies->push_back(std::move(*r));
      continue;
    }
    size_t n = 0;
    if (Status s = link_.Read(buf, sizeof buf, &n, deadline, &e); !s.ok()) {
      return Fail(kind_of(e), s.message() + in_time, kind);
    }
    fed += n;
    if (fed > cap) {
      return Fail(ErrorKind::kProtocol,
                  "protocol error: replies past " + std::to_string(cap) + " bytes for " +
                      std::to_string(commands.size()) + " commands",
                  kind);
    }
    if (redisReaderFeed(reader_, buf, n) != REDIS_OK) {
      return Fail(ErrorKind::kProtocol, std::string("protocol error: ") + reader_->errstr, kind);
    }
  }
  // Bytes past the last reply would be taken as the next pipeline's
  // replies (and a partial reply's tasks point at this call's budget).
  if (reader_->pos != reader_->len || reader_->ridx != -1) {
    return Fail(ErrorKind::kProtocol, "protocol error: bytes past the last reply", kind);
  }
  reader_->privdata = nullptr;
  return Status::Ok();
}

}  // namespace tierkv::remote
