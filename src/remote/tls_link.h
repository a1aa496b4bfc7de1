// A TLS client connection over TCP (OpenSSL), the transport of rediss://
// (RedisConn keeps hiredis for the protocol: it formats commands and parses
// replies; this moves the bytes).
//
// Contract: the peer is always verified (SSL_VERIFY_PEER) against the
// system's CA store, or against `ca_file` when one is given, and its
// certificate must name the host connected to (a DNS name, or the IP
// address of an IP literal); TLS 1.2 at least. Nothing is written to the
// socket in clear text: a failed handshake or verification fails Connect
// before any byte of a command is sent. Every connect, write and read is
// bounded by `timeout`.
//
// Thread safety: none; one owner at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "tierkv/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace tierkv::remote {

// The certificates a TLS connection uses (empty: the default).
struct TlsFiles {
  std::string ca_file;    // PEM CA bundle verifying the server; empty: the system's CA store
  std::string cert_file;  // PEM client certificate (mutual TLS); empty: none
  std::string key_file;   // its PEM private key; empty with cert_file: the key is in cert_file
  bool operator==(const TlsFiles&) const = default;
};

// What a failed TlsLink call means to its caller.
enum class LinkError { kNone, kConnect, kTimeout, kClosed };

class TlsLink {
 public:
  TlsLink() = default;
  ~TlsLink();
  TlsLink(const TlsLink&) = delete;
  TlsLink& operator=(const TlsLink&) = delete;

  // TCP connect (non-blocking, bounded by `timeout`), then the TLS handshake
  // with verification. On failure *err is kConnect (kTimeout when the time
  // ran out) and the Status's message names the step and OpenSSL's reason,
  // e.g. "TLS handshake: certificate verify failed (...)".
  Status Connect(const std::string& host, int port, const TlsFiles& files, std::chrono::milliseconds timeout,
                 LinkError* err);
  // Writes all of `data`, each wait for the socket bounded by the timeout.
  Status Write(std::string_view data, LinkError* err);
  // Reads some bytes (at least one) into buf[0, cap); *n gets how many.
  // kClosed when the server closed the connection, kTimeout when nothing
  // came within the timeout.
  Status Read(char* buf, size_t cap, size_t* n, LinkError* err);
  void Close();
  bool open() const { return ssl_ != nullptr; }

 private:
  Status TcpConnect(const std::string& host, int port, LinkError* err);
  Status Handshake(const std::string& host, const TlsFiles& files, LinkError* err);
  // Waits for the socket to be readable (want_read) or writable, up to the
  // timeout; false when the time ran out.
  bool Wait(bool want_read, std::chrono::steady_clock::time_point deadline) const;

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::chrono::milliseconds timeout_{0};
};

}  // namespace tierkv::remote
