#include "remote_flags.h"

#include <memory>
#include <string>

namespace tierkv::app {

void AddRemoteFlags(CLI::App* sub, RemoteOptions* r) {
  sub->add_option("--remote", r->url,
                  "A shared tier below the disk: redis://[[USER:]PASSWORD@]HOST:PORT[/DB] or "
                  "redis-cluster://[[USER:]PASSWORD@]HOST:PORT[,HOST:PORT...] (docs/remote.md). A request "
                  "looks past its local match there; chunks go up behind the requests. Its failures are misses. "
                  "Password: better in $TIERKV_REMOTE_PASSWORD than in the URL (which `ps` shows): it is used "
                  "when the URL has none (redis://HOST:PORT, or redis://USER:@HOST:PORT for an ACL user). "
                  "Printed with the password as ***. TLS: rediss://... or rediss-cluster://... (the server's "
                  "certificate is verified, against the system's CAs or --remote-tls-ca, and must name the "
                  "host given)")
      ->check([](const std::string& s) {
        RemoteOptions o;
        o.url = s;
        const Status st = o.Validate();
        return st.ok() ? std::string() : st.message();
      });
  sub->add_option("--remote-tls-ca", r->tls_ca_file,
                  "--remote rediss://: a PEM file of the CA certificates that verify the server (default: the "
                  "system's CA store). The server's certificate must also name the host in the URL (its DNS "
                  "name, or its IP address for an IP). A failed verification is a miss, logged; no command or "
                  "password is sent")
      ->check(CLI::ExistingFile);
  sub->add_option("--remote-tls-cert", r->tls_cert_file,
                  "--remote rediss://: a PEM client certificate, for servers that ask for one (mutual TLS: "
                  "redis-server's tls-auth-clients); default: none")
      ->check(CLI::ExistingFile);
  sub->add_option("--remote-tls-key", r->tls_key_file,
                  "--remote rediss://: the PEM private key of --remote-tls-cert (default: read from "
                  "--remote-tls-cert's file)")
      ->check(CLI::ExistingFile);
  sub->add_option("--remote-key-file", r->key_file,
                  "--remote: the servers' shared key(s), one per line (the first seals values, all open them: "
                  "rotation), mode 0600; default: $TIERKV_REMOTE_KEY. Required: values without this key's "
                  "seal are never served (docs/remote.md)")
      ->check(CLI::ExistingFile);
  sub->add_option("--remote-timeout-ms", r->timeout_ms,
                  "--remote: the bound on one whole exchange with Redis (connect, login, every reply of a "
                  "pipeline); a slower server is a miss")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000));
  sub->add_option_function<std::string>(
         "--remote-admit", [r](const std::string& s) { r->admit = *ParseRemoteAdmit(s); },
         "--remote: which chunks go up: reused (the default: chunks two requests reused from the local "
         "store) or always (every chunk stored)")
      ->check(CLI::IsMember({"reused", "always"}));
  sub->add_option_function<std::string>(
         "--remote-read", [r](const std::string& s) { r->read = *ParseRemoteRead(s); },
         "--remote: what a selective system below retention 1 fetches of a chunk only the remote tier "
         "holds: whole (the default: every row, kept locally) or important (the first retention x chunk "
         "rows of each layer in the value's importance order, by GETRANGE, attended to as they are and "
         "not stored; values written without an order are fetched whole)")
      ->check(CLI::IsMember({"whole", "important"}));
  sub->add_option("--remote-queue", r->queue_chunks,
                  "--remote: chunks waiting to go up at most; a write finding the queue full is dropped "
                  "and counted")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
}

}  // namespace tierkv::app
