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
                  "Printed with the password as ***. TLS (rediss://) is refused by this build (Debian's "
                  "hiredis 0.14 has none): use a local TLS tunnel")
      ->check([](const std::string& s) {
        RemoteOptions o;
        o.url = s;
        const Status st = o.Validate();
        return st.ok() ? std::string() : st.message();
      });
  sub->add_option("--remote-timeout-ms", r->timeout_ms,
                  "--remote: the bound on every connect, send and reply (a slower server is a miss)")
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
