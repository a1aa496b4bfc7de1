// tierkv bench-serve: a load generator speaking the OpenAI API that
// `tierkv serve` (or any compatible server) answers. Every request streams
// (stream: true, include_usage), so the time to first token is measured at
// the first text chunk, as a user sees it.
//
// Workload: JSON Lines, one session per line.
//   {"system": S, "turns": [T1, T2, ...], "max_tokens": N}
//       a chat: turn k goes to /v1/chat/completions with the system
//       message, every earlier turn and the server's answers to them (the
//       history grows as in LMCache's multi-round QA benchmark)
//   {"prefix": P, "turns": [Q1, Q2, ...], "max_tokens": N}
//       completions: each turn is the prompt P + Qk (a document and its
//       questions, or few-shot examples and a query)
// max_tokens is optional (--max-tokens). Turns of one session run in order;
// sessions run side by side.
//
// Threads: the clients (--concurrency C: C threads, each running sessions
// one after another, the file's sessions taken in turn and cycled), or
// --rate R: sessions start at R per second (Poisson arrivals, --seed), each
// on its own thread, at most kMaxInFlightSessions at once. After --duration
// no session starts and no new turn is sent; the requests in flight finish.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierkv/tools/latency.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct Session {
  bool chat = false;
  std::string system;  // chat
  std::string prefix;  // completions
  std::vector<std::string> turns;
  int max_tokens = 0;  // 0: the run's default
};

// Reads a workload file; errors name the line and the field.
Result<std::vector<Session>> ReadWorkload(const std::string& path);

struct ServeBenchOptions {
  std::string url;            // http://host:port
  double rate = 0;            // sessions started per second (open loop); or
  int concurrency = 0;        // clients running sessions back to back (closed loop)
  double duration_s = 60;     // how long new requests are sent
  int max_tokens = 32;        // for sessions that do not say
  bool ignore_eos = true;     // fixed output lengths (the server's ignore_eos)
  double request_timeout_s = 300;
  uint64_t seed = 1;          // --rate's arrivals
  Status Validate() const;
};

struct ServeBenchReport {
  double wall_s = 0;              // first request sent to last answer
  size_t requests = 0, ok = 0, errors = 0;
  std::vector<std::string> error_samples;  // the first few, with their cause
  LatencySummary ttft, tpot, e2e;  // ms
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double requests_per_s = 0, output_tokens_per_s = 0;
};

// Runs the workload against the server. `progress` (may be empty) is called
// about once a second with the requests answered so far.
Result<ServeBenchReport> RunServeBench(const ServeBenchOptions& o, const std::vector<Session>& sessions,
                                       const std::function<void(size_t done, size_t errors)>& progress);

std::string FormatServeBench(const ServeBenchReport& r);
std::string ServeBenchJson(const ServeBenchReport& r);

}  // namespace tierkv::bench
