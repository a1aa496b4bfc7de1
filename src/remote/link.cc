#include "remote/link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace tierkv::remote {
namespace {

// OpenSSL's reason for the last failure (its error queue, emptied here),
// or `fallback` when the queue is empty.
std::string OpenSslReason(const std::string& fallback) {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? fallback : out;
}

// While one lives, a write to a connection the server closed fails with
// EPIPE instead of killing the process with SIGPIPE (OpenSSL writes with
// write(2), which has no MSG_NOSIGNAL): SIGPIPE is blocked in this thread,
// and one it raised is taken off the pending set before the mask returns.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~NoSigpipe() {
    if (!blocked_) return;
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false, blocked_ = false;
};

bool IsIpLiteral(const std::string& host) {
  unsigned char addr[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), addr) == 1 || inet_pton(AF_INET6, host.c_str(), addr) == 1;
}

// The TLS settings every connection shares: TLS 1.2 at least, the peer
// verified against `files.ca_file` or the system's store, the client
// certificate when one is given. nullptr with *why on failure.
SSL_CTX* MakeContext(const TlsFiles& files, std::string* why) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    *why = "cannot create a TLS context: " + OpenSslReason("out of memory");
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);  // a server killed mid-stream reads as closed
#endif
  const bool cas = files.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx) == 1
                                         : SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) == 1;
  if (!cas) {
    *why = (files.ca_file.empty() ? std::string("the system's CA store") : "tls ca file '" + files.ca_file + "'") +
           ": " + OpenSslReason("cannot load");
  } else if (!files.cert_file.empty() &&
             SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    *why = "tls cert file '" + files.cert_file + "': " + OpenSslReason("cannot load");
  } else if (!files.cert_file.empty()) {
    const std::string& key = files.key_file.empty() ? files.cert_file : files.key_file;
    if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
      *why = "tls key file '" + key + "': " + OpenSslReason("cannot load, or not the certificate's key");
    }
  } else if (!files.key_file.empty()) {
    *why = "tls key file '" + files.key_file + "' given without a tls cert file";
  }
  if (!why->empty()) {
    SSL_CTX_free(ctx);
    return nullptr;
  }
  return ctx;
}

}  // namespace

Link::~Link() { Close(); }

void Link::Close() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // no close_notify: the peer may be gone, and closing is enough
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
  ssl_ = nullptr;
  ctx_ = nullptr;
  fd_ = -1;
}

bool Link::Wait(bool want_read, Deadline deadline) const {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, static_cast<short>(want_read ? POLLIN : POLLOUT), 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
    if (r > 0) return true;  // ready, or an error/hang-up the next call reports
    if (r < 0 && errno != EINTR) return true;
  }
}

Status Link::TcpConnect(const std::string& host, int port, Deadline deadline, LinkError* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  *err = LinkError::kConnect;
  if (gai != 0) return Status::Unavailable("cannot resolve '" + host + "': " + gai_strerror(gai));
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) {
      why = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd_, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!Wait(false, deadline)) {
        why = "connect timed out";
        *err = LinkError::kTimeout;
      } else {
        int so = 0;
        socklen_t len = sizeof so;
        ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so, &len);
        errno = so;
        rc = so == 0 ? 0 : -1;
      }
    }
    if (rc == 0) {
      const int one = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::freeaddrinfo(res);
      *err = LinkError::kNone;
      return Status::Ok();
    }
    if (*err != LinkError::kTimeout) why = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
  }
  ::freeaddrinfo(res);
  return Status::Unavailable("TCP connect: " + why);
}

Status Link::Handshake(const std::string& host, const TlsFiles& files, Deadline deadline, LinkError* err) {
  *err = LinkError::kConnect;
  std::string why;
  ctx_ = MakeContext(files, &why);
  if (ctx_ == nullptr) return Status::Unavailable(why);
  ssl_ = SSL_new(ctx_);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) return Status::Unavailable("TLS: " + OpenSslReason("SSL_new"));
  // The certificate must name the host: its IP address for an IP literal,
  // else its DNS name (also sent as SNI).
  const bool named = IsIpLiteral(host) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), host.c_str()) == 1
                                       : SSL_set_tlsext_host_name(ssl_, host.c_str()) == 1 &&
                                             SSL_set1_host(ssl_, host.c_str()) == 1;
  if (!named) return Status::Unavailable("TLS: cannot check host '" + host + "': " + OpenSslReason("?"));
  const NoSigpipe no_sigpipe;
  for (;;) {
    ERR_clear_error();
    const int r = SSL_connect(ssl_);
    if (r == 1) break;
    const int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (Wait(e == SSL_ERROR_WANT_READ, deadline)) continue;
      *err = LinkError::kTimeout;
      return Status::Unavailable("TLS handshake: no answer in time");
    }
    std::string reason = OpenSslReason(e == SSL_ERROR_SYSCALL ? "the server closed the connection" : "failed");
    const long v = SSL_get_verify_result(ssl_);
    if (v != X509_V_OK) reason += " (" + std::string(X509_verify_cert_error_string(v)) + ")";
    return Status::Unavailable("TLS handshake: " + reason);
  }
  *err = LinkError::kNone;
  return Status::Ok();
}

Status Link::Connect(const std::string& host, int port, bool tls, const TlsFiles& files, Deadline deadline,
                     LinkError* err) {
  Close();
  Status s = TcpConnect(host, port, deadline, err);
  if (s.ok() && tls) s = Handshake(host, files, deadline, err);
  if (!s.ok()) Close();
  return s;
}

Status Link::PlainWrite(std::string_view data, Deadline deadline, LinkError* err) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Wait(false, deadline)) continue;
      *err = LinkError::kTimeout;
      return Status::Unavailable("cannot send in time");
    }
    *err = LinkError::kClosed;
    return Status::Unavailable(std::string("send: ") + std::strerror(errno));
  }
  return Status::Ok();
}

Status Link::PlainRead(char* buf, size_t cap, size_t* n, Deadline deadline, LinkError* err) {
  for (;;) {
    const ssize_t r = ::recv(fd_, buf, cap, 0);
    if (r > 0) {
      *n = static_cast<size_t>(r);
      return Status::Ok();
    }
    if (r == 0) {
      *err = LinkError::kClosed;
      return Status::Unavailable("the server closed the connection");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Wait(true, deadline)) continue;
      *err = LinkError::kTimeout;
      return Status::Unavailable("no whole reply in time");
    }
    *err = LinkError::kClosed;
    return Status::Unavailable(std::string("recv: ") + std::strerror(errno));
  }
}

Status Link::Write(std::string_view data, Deadline deadline, LinkError* err) {
  *err = LinkError::kNone;
  if (ssl_ == nullptr) return PlainWrite(data, deadline, err);
  const NoSigpipe no_sigpipe;
  while (!data.empty()) {
    ERR_clear_error();
    const int n = SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), INT_MAX)));
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (Wait(e == SSL_ERROR_WANT_READ, deadline)) continue;
      *err = LinkError::kTimeout;
      return Status::Unavailable("cannot send in time");
    }
    *err = LinkError::kClosed;
    return Status::Unavailable("TLS write: " + OpenSslReason(errno != 0 ? std::strerror(errno) : "connection closed"));
  }
  return Status::Ok();
}

Status Link::Read(char* buf, size_t cap, size_t* n, Deadline deadline, LinkError* err) {
  *err = LinkError::kNone;
  if (ssl_ == nullptr) return PlainRead(buf, cap, n, deadline, err);
  const NoSigpipe no_sigpipe;  // a read may write (a TLS 1.3 key update's answer)
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(cap, INT_MAX)));
    if (r > 0) {
      *n = static_cast<size_t>(r);
      return Status::Ok();
    }
    const int e = SSL_get_error(ssl_, r);
    // Decrypted bytes already buffered need no wait for the socket.
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && SSL_pending(ssl_) > 0) continue;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (Wait(e == SSL_ERROR_WANT_READ, deadline)) continue;
      *err = LinkError::kTimeout;
      return Status::Unavailable("no whole reply in time");
    }
    *err = LinkError::kClosed;
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
      return Status::Unavailable("the server closed the connection");
    }
    return Status::Unavailable("TLS read: " + OpenSslReason(errno != 0 ? std::strerror(errno) : "failed"));
  }
}

}  // namespace tierkv::remote
