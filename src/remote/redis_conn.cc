#include "remote/redis_conn.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>

namespace tierkv::remote {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

Reply Copy(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = Reply::Type::kString; break;
    case REDIS_REPLY_STATUS: out.type = Reply::Type::kStatus; break;
    case REDIS_REPLY_ERROR: out.type = Reply::Type::kError; break;
    case REDIS_REPLY_INTEGER: out.type = Reply::Type::kInteger; break;
    case REDIS_REPLY_ARRAY: out.type = Reply::Type::kArray; break;
    default: out.type = Reply::Type::kNil; break;
  }
  if (r->str != nullptr) out.str.assign(r->str, r->len);
  out.integer = r->integer;
  if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Copy(r->element[i]));
  }
  return out;
}

// hiredis reports a read timeout as an I/O error with EAGAIN's message.
ErrorKind KindOfContextError(const redisContext* c) {
  if (c->err == REDIS_ERR_EOF) return ErrorKind::kClosed;
  if (c->err == REDIS_ERR_IO) {
    const std::string s = c->errstr;
    if (s.find("temporarily unavailable") != std::string::npos ||
        s.find("timed out") != std::string::npos) {
      return ErrorKind::kTimeout;
    }
    if (s.find("reset") != std::string::npos || s.find("Broken pipe") != std::string::npos) {
      return ErrorKind::kClosed;
    }
  }
  return ErrorKind::kConnect;
}

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

RedisConn::RedisConn(Endpoint endpoint, std::chrono::milliseconds timeout, Login login)
    : endpoint_(std::move(endpoint)), timeout_(timeout), login_(std::move(login)) {}

RedisConn::~RedisConn() {
  if (ctx_ != nullptr) redisFree(ctx_);
  if (reader_ != nullptr) redisReaderFree(reader_);
}

Status RedisConn::Fail(ErrorKind kind, const std::string& what, ErrorKind* out) {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  link_.Close();
  if (reader_ != nullptr) {
    redisReaderFree(reader_);
    reader_ = nullptr;
  }
  backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  // A refused login or database does not heal by waiting: calls during its
  // backoff fail with its kind; after a transport failure, with kConnect.
  backoff_kind_ = kind == ErrorKind::kTimeout || kind == ErrorKind::kClosed ? ErrorKind::kConnect : kind;
  last_failure_ = what;
  *out = kind;
  return Status::Unavailable("redis " + endpoint_.ToString() + ": " + what);
}

Status RedisConn::Open(ErrorKind* kind) {
  if (login_.tls) {
    LinkError e;
    const Status s = link_.Connect(endpoint_.host, endpoint_.port, login_.tls_files, timeout_, &e);
    // A slow connect or handshake is a failed connect, as on the hiredis path.
    if (!s.ok()) return Fail(ErrorKind::kConnect, s.message(), kind);
    reader_ = redisReaderCreate();
    if (reader_ == nullptr) return Fail(ErrorKind::kConnect, "cannot allocate a reply reader", kind);
    return Status::Ok();
  }
  ctx_ = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, ToTimeval(timeout_));
  if (ctx_ == nullptr) return Fail(ErrorKind::kConnect, "cannot allocate a context", kind);
  if (ctx_->err != 0) return Fail(ErrorKind::kConnect, ctx_->errstr, kind);
  if (redisSetTimeout(ctx_, ToTimeval(timeout_)) != REDIS_OK) {
    return Fail(ErrorKind::kConnect, "cannot set the timeout", kind);
  }
  return Status::Ok();
}

Status RedisConn::Connect(ErrorKind* kind) {
  if (std::chrono::steady_clock::now() < retry_at_) {
    backed_off_ = true;
    *kind = backoff_kind_;
    return Status::Unavailable("redis " + endpoint_.ToString() + ": backing off after: " + last_failure_);
  }
  RETURN_IF_ERROR(Open(kind));
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
  RETURN_IF_ERROR(Pipeline(login, &r, kind));
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
  if (!connected()) RETURN_IF_ERROR(Connect(kind));
  if (login_.tls) return PipelineTls(commands, replies, kind);
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const Command& c : commands) {
    ArgvOf(c, &argv, &lens);
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      return Fail(KindOfContextError(ctx_), ctx_->errstr, kind);
    }
  }
  replies->reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
      const ErrorKind k = KindOfContextError(ctx_);
      if (k == ErrorKind::kTimeout) {
        return Fail(k, "no reply within " + std::to_string(timeout_.count()) + " ms (" + ctx_->errstr + ")", kind);
      }
      return Fail(k, ctx_->errstr[0] != '\0' ? ctx_->errstr : "no reply", kind);
    }
    replies->push_back(Copy(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  backoff_ = std::chrono::milliseconds(0);
  return Status::Ok();
}

Status RedisConn::PipelineTls(std::span<const Command> commands, std::vector<Reply>* replies, ErrorKind* kind) {
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
  LinkError e;
  if (Status s = link_.Write(out, &e); !s.ok()) return Fail(kind_of(e), s.message(), kind);
  replies->reserve(commands.size());
  char buf[64 * 1024];
  while (replies->size() < commands.size()) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      return Fail(ErrorKind::kClosed, std::string("protocol error: ") + reader_->errstr, kind);
    }
    if (raw != nullptr) {
      replies->push_back(Copy(static_cast<redisReply*>(raw)));
      freeReplyObject(raw);
      continue;
    }
    size_t n = 0;
    if (Status s = link_.Read(buf, sizeof buf, &n, &e); !s.ok()) return Fail(kind_of(e), s.message(), kind);
    if (redisReaderFeed(reader_, buf, n) != REDIS_OK) {
      return Fail(ErrorKind::kClosed, std::string("protocol error: ") + reader_->errstr, kind);
    }
  }
  backoff_ = std::chrono::milliseconds(0);
  return Status::Ok();
}

}  // namespace tierkv::remote
