// tierkv bench-serve: load on an OpenAI-compatible server (tierkv serve).
#include <unistd.h>

#include <cstdio>

#include "commands.h"
#include "tierkv/tools/serve_bench.h"

namespace tierkv::app {

void AddBenchServe(CLI::App& app, Action* run) {
  struct Args {
    bench::ServeBenchOptions o;
    std::string workload;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench-serve",
      "Load on a running server speaking the OpenAI API (tierkv serve): sessions from a JSON Lines workload "
      "(chats whose history grows, or a prefix with several questions), every request streamed; reports time to "
      "first token, time per output token and end-to-end latency (mean, p50, p90, p99), throughput and errors");
  sub->add_option("--url", a->o.url, "The server, http://host:port")->required();
  sub->add_option("--workload", a->workload,
                  "JSON Lines, a session per line: {\"system\": S, \"turns\": [...]} (a chat) or "
                  "{\"prefix\": P, \"turns\": [...]} (completions of P + each turn); optional \"max_tokens\"")
      ->required();
  sub->add_option("--rate", a->o.rate, "Sessions started per second (Poisson arrivals; open loop)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--concurrency", a->o.concurrency, "Clients, each running sessions back to back (closed loop)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--duration", a->o.duration_s, "Seconds during which requests are sent (those in flight then finish)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-tokens", a->o.max_tokens, "Tokens per answer, for sessions that do not say")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_flag("!--allow-eos", a->o.ignore_eos,
                "Let answers end at the model's end of text (by default ignore_eos is sent, so every answer has "
                "max_tokens tokens and runs are comparable)");
  sub->add_option("--timeout", a->o.request_timeout_s, "Seconds a request may take before it counts as an error")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--seed", a->o.seed, "Seed of --rate's arrivals")->capture_default_str();
  sub->add_flag("--json", a->json, "Print the report as JSON");
  sub->callback([a, run] {
    *run = [a]() -> int {
      if (Status s = a->o.Validate(); !s.ok()) return Fail(s.ToString());
      auto sessions = bench::ReadWorkload(a->workload);
      if (!sessions.ok()) return Fail(sessions.status().ToString());
      const bool tty = ::isatty(2);
      auto report = bench::RunServeBench(a->o, *sessions, [tty](size_t done, size_t errors) {
        std::fprintf(stderr, "%sbench-serve: %zu answered, %zu errors%s", tty ? "\r" : "", done, errors, tty ? "" : "\n");
      });
      if (tty) std::fprintf(stderr, "\n");
      if (!report.ok()) return Fail(report.status().ToString());
      std::fputs((a->json ? bench::ServeBenchJson(*report) + "\n" : bench::FormatServeBench(*report)).c_str(), stdout);
      return report->errors == 0 ? 0 : 1;
    };
  });
}

}  // namespace tierkv::app
