// tierkv serve: the engine behind an OpenAI-compatible HTTP API.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "engine_flags.h"
#include "signals.h"
#include "commands.h"
#include "tierkv/engine.h"
#include "tierkv/hex.h"
#include "tierkv/server.h"

namespace tierkv::app {

namespace {

struct ServeArgs {
  EngineFlags f;
  std::string system = "as-like", chat_template = "auto";
  double retention = 1.0;
  server::ServerOptions server;
  double grace_seconds = 10;
  double request_timeout_seconds = 30;
};

// $XDG_CACHE_HOME/tierkv, else ~/.cache/tierkv: a restart finds the
// prefixes stored before, each store namespace in a subdirectory named by
// its fingerprint. Its parent is created when missing (a fresh account has
// no ~/.cache).
Result<std::string> DefaultCacheDir() {
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/tierkv";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/tierkv";
  } else {
    return Status::InvalidArgument("--cache-dir: neither XDG_CACHE_HOME nor HOME is set; give a directory");
  }
  std::error_code ec;
  std::filesystem::create_directories(DirName(dir), ec);
  if (ec) return Status::IOError("cannot create " + DirName(dir) + " for the default cache directory: " + ec.message());
  return dir;
}

// --api-key values, then $TIERKV_API_KEYS (comma-separated): the server
// checks them (ServerOptions::Validate names a bad one by its position in
// this order) and drops repeats.
std::vector<std::string> ApiKeys(std::vector<std::string> keys) {
  if (const char* env = std::getenv("TIERKV_API_KEYS"); env && *env) {
    std::string all = env;
    size_t at = 0;
    while (at <= all.size()) {
      const size_t comma = std::min(all.find(',', at), all.size());
      keys.push_back(all.substr(at, comma - at));
      at = comma + 1;
    }
  }
  return keys;
}

Result<int> Serve(const ServeArgs& a) {
  ASSIGN_OR_RETURN(auto loaded, LoadModelAndTokenizer(a.f.model, a.f.tokenizer, a.f.weights));
  // Before the engine opens the store: a template this build cannot render stops here.
  auto chat = ChooseChatTemplate(loaded.model->embedded_vocab(), a.chat_template);
  if (!chat.ok()) return chat.status().WithContext(a.f.model);
  auto system = engine::ParseSystem(a.system);
  if (!system.ok()) return system.status().WithContext("--system");
  engine::EngineOptions o = EngineOptionsFrom(a.f, a.retention);
  o.system = *system;
  // Every job the scheduler may hold gets its remote lookups ahead of it
  // (a job whose fetch was dropped would start with the local store only).
  o.remote.ahead_prompts = std::max<uint32_t>(o.remote.ahead_prompts,
                                              static_cast<uint32_t>(a.server.max_queue + a.server.max_running));
  std::string cache_dir = a.f.cache_dir;
  if (cache_dir.empty()) {
    // One directory per store namespace (model, tokenizer, chunk size): a
    // store holds one, so serving another model by default must not find
    // the first one's directory and be refused.
    ASSIGN_OR_RETURN(std::string base, DefaultCacheDir());
    cache_dir = base + "/" + Hex64(engine::StoreFingerprint(*loaded.model, o));
    // 0700, as the store's own directory below it: its names are models'.
    RETURN_IF_ERROR(FileSystem::Default()->CreateDir(base).WithContext("the default cache directory's parent"));
  }
  const DiskBudget budget = PlaceStore(a.f, cache_dir, &o);
  std::fprintf(stderr, "tierkv: disk budget %.1f MiB (%s)\n", double(budget.bytes) / double(1u << 20), budget.how.c_str());
  ASSIGN_OR_RETURN(auto eng, engine::Engine::Open(*loaded.model, o));
  server::ServerOptions so = a.server;
  so.chat = *chat;
  so.grace_ms = static_cast<int>(a.grace_seconds * 1000);
  if (so.admin_token.empty()) {
    if (const char* t = std::getenv("TIERKV_ADMIN_TOKEN"); t) so.admin_token = t;
  }
  so.request_timeout_ms = static_cast<int>(a.request_timeout_seconds * 1000);
  so.api_keys = ApiKeys(a.server.api_keys);
  if (so.api_keys.empty() && !server::IsLoopbackAddress(so.host)) {
    std::fprintf(stderr,
                 "tierkv: warning: listening on %s without --api-key: anyone who can reach it may "
                 "use it, and prompts' shared prefixes tell one client what another sent "
                 "(cached_tokens)\n",
                 so.host.c_str());
  }
  ASSIGN_OR_RETURN(auto srv, server::Server::Create(*loaded.model, *loaded.tokenizer, eng.get(), so));
  ASSIGN_OR_RETURN(int port, srv->Bind());
  server::Server* s = srv.get();
  SetShutdownHandler([s] {
    std::fprintf(stderr, "tierkv: shutting down (running requests may finish; a second signal exits now)\n");
    s->Shutdown();
  });
  std::printf("tierkv: serving %s as %s on http://%s:%d (cache %s, scheduler %s, chat template %s%s)\n",
              so.model_id.c_str(), a.system.c_str(), so.host.c_str(), port, o.cache_dir.c_str(),
              so.scheduler.c_str(), std::string(ChatFormatName(so.chat.format)).c_str(),
              so.chat.detected ? "" : ", chosen by --chat-template");
  std::fflush(stdout);
  Status run = srv->Run();
  SetShutdownHandler(nullptr);
  srv.reset();  // the scheduler ends; then the engine closes its store
  eng.reset();
  RETURN_IF_ERROR(run);
  std::fprintf(stderr, "tierkv: stopped\n");
  return 0;
}

}  // namespace

void AddServe(CLI::App& app, Action* run) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand(
      "serve",
      "Serve the model over an OpenAI-compatible HTTP API (POST /v1/completions, /v1/chat/completions; "
      "GET /v1/models, /health, /metrics, /v1/cache), reusing stored prompt prefixes");
  AddEngineFlags(sub, &a->f,
                 EngineFlagUse{"Where prompt K/V is stored and found again across restarts (default: "
                               "$XDG_CACHE_HOME/tierkv/FINGERPRINT, else ~/.cache/tierkv/FINGERPRINT: one directory per "
                               "model, tokenizer and --chunk-tokens). A directory holds one such namespace: "
                               "another is refused at start, naming what differs"});
  sub->add_option("--chat-template", a->chat_template,
                  "How /v1/chat/completions writes a conversation: auto (recognise the model's "
                  "tokenizer.chat_template: Llama 3.1-3.3, ChatML/Qwen2, Mistral Nemo; the tierkv format "
                  "for a model without one), or llama3, chatml, mistral, tierkv")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "llama3", "chatml", "mistral", "tierkv"}));
  sub->add_option("--system", a->system,
                  "How a stored prefix is reused (tierkv compare's systems; as-like reads all of it, "
                  "the selective ones a share)")
      ->capture_default_str();
  sub->add_option("--retention", a->retention, "Share of the prefix rows a selective system reads per layer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--scheduler", a->server.scheduler,
                  "Which waiting request starts next: fcfs (arrival order, API keys taking turns) or car (CaR: a shuffled window "
                  "ordered by where each prefix's K/V is, pools before nothing stored before disk, and a "
                  "timed prefetcher)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fcfs", "car"}));
  sub->add_option("--window", a->server.window, "car: how many waiting requests the shuffled window holds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--prefetch", a->server.prefetch,
                  "car: load a waiting request's prefix from disk into the pools when a running request is "
                  "about to finish (true or false)")
      ->capture_default_str();
  sub->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", a->server.port, "Port to listen on (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--max-running", a->server.max_running, "Requests generating at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-queue", a->server.max_queue, "Requests waiting beyond --max-running; more (or a key's beyond its share while others wait) get 429")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-body-bytes", a->server.max_body_bytes, "Largest request body; larger ones get 413")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--model-id", a->server.model_id, "The model's name in /v1/models and responses")
      ->capture_default_str();
  sub->add_option("--admin-token", a->server.admin_token,
                  "Token that DELETE /v1/cache (drop every stored prefix) must send as 'Authorization: Bearer "
                  "TOKEN' (default: $TIERKV_ADMIN_TOKEN, which keeps it out of the process list; none: the "
                  "flush is refused). With --api-key, /metrics and GET /v1/cache need it too (their counts "
                  "move with every key's requests)");
  sub->add_option("--api-key", a->server.api_keys,
                  "An API key the /v1/ routes accept as 'Authorization: Bearer KEY' (401 otherwise); "
                  "repeat for several (also $TIERKV_API_KEYS, comma-separated, which keeps them out of the "
                  "process list). Each key's stored prefixes are its own: one key never reuses, nor learns "
                  "of, another's (a request's cache_salt splits them further)");
  sub->add_option("--share-prefixes", a->server.share_prefixes,
                  "With --api-key: the keys trust each other and share one prefix cache (true or false)")
      ->capture_default_str();
  sub->add_option("--allowed-hosts", a->server.allowed_hosts,
                  "Host names requests may carry besides the listen address (and localhost on a loopback "
                  "address); '*': any. Others get 403, which stops DNS-rebinding pages. Listening on "
                  "0.0.0.0 or :: without it accepts any Host")
      ->delimiter(',');
  sub->add_option("--cors-origin", a->server.cors_origin,
                  "The one browser origin (e.g. https://app.example.com) allowed to call the server "
                  "cross-site; default: none, and requests from other sites' pages get 403");
  sub->add_option("--max-connections", a->server.max_connections,
                  "Connections served at once (a worker each); one more is answered 503 at once")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  sub->add_option("--max-connections-per-address", a->server.max_connections_per_address,
                  "Of those, what one client address (IPv6: its /64) may hold; one more is answered 503 at once "
                  "(0: a quarter of --max-connections)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{100000}));
  sub->add_option("--request-timeout-seconds", a->request_timeout_seconds,
                  "How long a client may take to send one whole request (head and body); slower ones "
                  "get 408 and their connection closes")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--grace-seconds", a->grace_seconds,
                  "On SIGTERM or SIGINT, how long queued and running requests may finish (new ones get 503) "
                  "before they are cancelled (a stream then ends with an error event and [DONE])")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto r = Serve(*a);
      if (!r.ok()) return Fail(r.status().ToString());
      return *r;
    };
  });
}

}  // namespace tierkv::app
