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

}  // namespace

std::string_view ErrorKindName(ErrorKind k) {
  switch (k) {
    case ErrorKind::kNone: return "none";
    case ErrorKind::kConnect: return "connect";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kClosed: return "closed";
    case ErrorKind::kOom: return "oom";
    case ErrorKind::kReply: return "reply";
    case ErrorKind::kCount: break;
  }
  return "?";
}

ErrorKind KindOfErrorReply(const Reply& r) {
  return r.str.starts_with("OOM") ? ErrorKind::kOom : ErrorKind::kReply;
}

RedisConn::RedisConn(Endpoint endpoint, std::chrono::milliseconds timeout, int db)
    : endpoint_(std::move(endpoint)), timeout_(timeout), db_(db) {}

RedisConn::~RedisConn() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

Status RedisConn::Fail(ErrorKind kind, const std::string& what, ErrorKind* out) {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  *out = kind;
  return Status::Unavailable("redis " + endpoint_.ToString() + ": " + what);
}

Status RedisConn::Connect(ErrorKind* kind) {
  if (std::chrono::steady_clock::now() < retry_at_) {
    *kind = ErrorKind::kConnect;
    return Status::Unavailable("redis " + endpoint_.ToString() + ": backing off after a failure");
  }
  ctx_ = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, ToTimeval(timeout_));
  if (ctx_ == nullptr) return Fail(ErrorKind::kConnect, "cannot allocate a context", kind);
  if (ctx_->err != 0) return Fail(ErrorKind::kConnect, ctx_->errstr, kind);
  if (redisSetTimeout(ctx_, ToTimeval(timeout_)) != REDIS_OK) {
    return Fail(ErrorKind::kConnect, "cannot set the timeout", kind);
  }
  if (db_ != 0) {
    std::vector<Reply> r;
    const Command select = {"SELECT", std::to_string(db_)};
    backoff_ = std::chrono::milliseconds(0);
    RETURN_IF_ERROR(Pipeline(std::span(&select, 1), &r, kind));
    if (r[0].is_error()) return Fail(ErrorKind::kReply, "SELECT " + std::to_string(db_) + ": " + r[0].str, kind);
  }
  return Status::Ok();
}

Status RedisConn::Pipeline(std::span<const Command> commands, std::vector<Reply>* replies,
                           ErrorKind* kind) {
  *kind = ErrorKind::kNone;
  replies->clear();
  if (ctx_ == nullptr) RETURN_IF_ERROR(Connect(kind));
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const Command& c : commands) {
    argv.clear();
    lens.clear();
    for (const std::string& a : c) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      return Fail(KindOfContextError(ctx_), ctx_->errstr, kind);
    }
  }
  replies->reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
      const ErrorKind k = KindOfContextError(ctx_);
      return Fail(k, ctx_->errstr[0] != '\0' ? ctx_->errstr : "no reply", kind);
    }
    replies->push_back(Copy(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  backoff_ = std::chrono::milliseconds(0);
  return Status::Ok();
}

}  // namespace tierkv::remote
