// One generation request between the HTTP worker that received it and the
// scheduler thread that runs it. The scheduler appends text (Emit) and ends
// the job (Finish); the worker takes the text as it comes (Next, for
// streaming) or waits for the end (Wait). A client that goes away cancels
// (Cancel): the scheduler drops the job at its next step and frees its K/V.
//
// Thread-safe. Shared (std::shared_ptr) by the worker and the scheduler;
// whichever lets go last frees it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/engine.h"
#include "tierkv/generate.h"
#include "tierkv/mutex.h"
#include "tierkv/status.h"

namespace tierkv::sched {

using Clock = std::chrono::steady_clock;

struct GenerationParams {
  std::vector<int32_t> prompt;  // tokens, BOS first
  int max_tokens = 16;          // at least 1 (the caller checked the context)
  SamplerOptions sampler;
  // Generation ends before the first occurrence of any of these (not
  // included in the text).
  std::vector<std::string> stop;
  bool ignore_eos = false;  // EOS and BOS do not end the generation
  // More tokens that end it as EOS does (a chat format's end of turn).
  std::vector<int32_t> stop_tokens;
  double retention = -1;    // the request's share of prefix rows (< 0: the engine's)
  // Whose stored prefixes the request may reuse and adds to (a tenant's API
  // key and cache_salt; engine::ServeOptions::cache_namespace). 0: shared.
  uint64_t cache_namespace = 0;
  // Who sent it (the server's API key number; 0: no key): the queue and the
  // running slots are shared fairly between tenants (sched/fair_queue.h).
  uint32_t tenant = 0;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
// OpenAI's finish_reason ("stop", "length"; "cancelled" and "error" are ours).
const char* FinishReasonName(FinishReason r);

// What a finished job did.
struct Outcome {
  FinishReason reason = FinishReason::kError;
  Status status;     // not OK only for kError
  std::string text;  // all of it
  size_t completion_tokens = 0;
  engine::RequestStats prefill;  // the prompt's pass through the engine (reuse, reads, TTFT parts)
  double queue_ms = 0;           // arrival to the start of its prefill
  double ttft_ms = 0;            // arrival to its first token
  double decode_ms = 0;          // first token to the last
  // Where its prefix K/V was when it was queued (car: entering the window;
  // fcfs: at its start) and when it started; whether it was prefetched.
  engine::PrefixPlace waited_as = engine::PrefixPlace::kNone;
  engine::PrefixPlace started_as = engine::PrefixPlace::kNone;
  bool prefetched = false;
};

class Job {
 public:
  explicit Job(GenerationParams params);
  const GenerationParams& params() const { return params_; }
  Clock::time_point arrival() const { return arrival_; }

  // ---- the worker's side
  // Blocks until there is text not yet taken or the job has ended, for at
  // most `wait` (so the worker can look at its client between waits).
  // Returns the new text (empty when the time ran out); *ended is set once
  // the job has ended and all its text was taken (Wait() then returns at once).
  std::string Next(std::chrono::milliseconds wait, bool* ended) TIERKV_EXCLUDES(mu_);
  // Blocks until the job has ended, for at most `wait`; whether it has.
  bool WaitFor(std::chrono::milliseconds wait) TIERKV_EXCLUDES(mu_);
  // Blocks until the job has ended; its outcome.
  Outcome Wait() TIERKV_EXCLUDES(mu_);
  void Cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // ---- the scheduler's side
  // Its remote lookups ran ahead while it was queued (Engine::FetchAhead):
  // its prefill asks the local store only. Set before the scheduler thread
  // takes the job from the queue (under the scheduler's lock).
  // `ahead`: Engine::FetchAhead's flag (null: none ran).
  void set_ahead(engine::AheadDone ahead) { ahead_ = std::move(ahead); }
  bool fetched_ahead() const { return ahead_ != nullptr; }
  // Whether it may start: its remote lookups are over, or none ran.
  bool ready() const { return !ahead_ || ahead_->load(); }
  void Emit(std::string_view text) TIERKV_EXCLUDES(mu_);
  // Ends the job; `o.text` is ignored (the emitted text is kept).
  void End(Outcome o) TIERKV_EXCLUDES(mu_);

 private:
  const GenerationParams params_;
  const Clock::time_point arrival_;
  // One wait on cv_, at most until `until`; false (without waiting) once
  // `until` has passed. Callers loop on their own condition.
  bool WaitUntil(Clock::time_point until) TIERKV_REQUIRES(mu_);

  std::atomic<bool> cancelled_{false};
  engine::AheadDone ahead_;  // set before it is queued, then only read
  mutable Mutex mu_;
  CondVar cv_;
  std::string text_ TIERKV_GUARDED_BY(mu_);  // emitted so far
  size_t taken_ TIERKV_GUARDED_BY(mu_) = 0;  // of text_, handed to Next
  bool ended_ TIERKV_GUARDED_BY(mu_) = false;
  Outcome outcome_ TIERKV_GUARDED_BY(mu_);
};

}  // namespace tierkv::sched
