// A client connection over TCP, plain (redis://) or TLS (OpenSSL,
// rediss://): the transport of RedisConn, which keeps hiredis for the
// protocol (it formats commands and parses replies); this moves the bytes.
// hiredis's own blocking context is not used: its timeout bounds each
// read, not a whole reply, so a server dripping a byte at a time could hold
// a caller for ever (every wait here is bounded by a caller's deadline).
//
// Contract over TLS: the peer is always verified (SSL_VERIFY_PEER) against the
// system's CA store, or against `ca_file` when one is given, and its
// certificate must name the host connected to (a DNS name, or the IP
// address of an IP literal); TLS 1.2 at least. Nothing is written to the
// socket in clear text: a failed handshake or verification fails Connect
// before any byte of a command is sent. Connect is bounded by its timeout;
// every write and read by the deadline its caller gives.
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

using Deadline = std::chrono::steady_clock::time_point;

// What a failed Link call means to its caller.
enum class LinkError { kNone, kConnect, kTimeout, kClosed };

class Link {
 public:
  Link() = default;
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // TCP connect (non-blocking), then with `tls` the TLS handshake with
  // verification of `files`, both by `deadline` (the caller's exchange's:
  // name resolution aside). On failure *err is kConnect (kTimeout when the
  // time ran out) and the Status's message names the step and OpenSSL's
  // reason, e.g. "TLS handshake: certificate verify failed (...)".
  Status Connect(const std::string& host, int port, bool tls, const TlsFiles& files, Deadline deadline,
                 LinkError* err);
  // Writes all of `data` by `deadline` (kTimeout after it).
  Status Write(std::string_view data, Deadline deadline, LinkError* err);
  // Reads some bytes (at least one) into buf[0, cap); *n gets how many.
  // kClosed when the server closed the connection, kTimeout when nothing
  // came by `deadline`.
  Status Read(char* buf, size_t cap, size_t* n, Deadline deadline, LinkError* err);
  void Close();
  bool open() const { return fd_ >= 0; }

 private:
  Status TcpConnect(const std::string& host, int port, Deadline deadline, LinkError* err);
  Status Handshake(const std::string& host, const TlsFiles& files, Deadline deadline, LinkError* err);
  // Waits for the socket to be readable (want_read) or writable, up to
  // `deadline`; false when the time ran out.
  bool Wait(bool want_read, Deadline deadline) const;
  Status PlainWrite(std::string_view data, Deadline deadline, LinkError* err);
  Status PlainRead(char* buf, size_t cap, size_t* n, Deadline deadline, LinkError* err);

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;  // null: plain TCP
};

}  // namespace tierkv::remote
