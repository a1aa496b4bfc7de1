#include "sched/scheduler.h"

#include <pthread.h>

#include <algorithm>
#include <limits>
#include <map>

#include "sched/output_text.h"
#include "tierkv/elapsed.h"
#include "tierkv/logging.h"

namespace tierkv::sched {

Result<SchedulerKind> ParseScheduler(std::string_view name) {
  if (name == "fcfs") return SchedulerKind::kFcfs;
  if (name == "car") return SchedulerKind::kCar;
  return Status::InvalidArgument("scheduler: unknown '" + std::string(name) + "' (fcfs or car)");
}

Status SchedulerOptions::Validate() const {
  if (max_queue == 0) return Status::InvalidArgument("max_queue: must be at least 1");
  if (max_running == 0) return Status::InvalidArgument("max_running: must be at least 1");
  if (kind == SchedulerKind::kCar && window == 0) {
    return Status::InvalidArgument("window: must be at least 1");
  }
  return Status::Ok();
}

// A job that has a first token: its K/V and where its decoding stands.
struct Scheduler::Running {
  std::shared_ptr<Job> job;
  std::shared_ptr<Sequence> seq;
  Sampler sampler;
  std::vector<float> logits;  // the next token's
  int32_t prev = 0;           // the last token run
  OutputText text;            // generated so far, and what the job was handed
  Outcome out;
  Clock::time_point first_token;
  engine::PrefixLocation where;  // car: its score events' entries
  bool events = false;           // the scheduler raises its score events (a locating policy)
  bool served = false;           // Serve was called (its start event raised)
  explicit Running(const GenerationParams& p)
      : sampler(p.sampler), text(p.stop) {}
};

Scheduler::Scheduler(const Model& model, const Tokenizer& tokenizer, engine::Engine* engine,
                     SchedulerOptions options, OutcomeObserver on_end)
    : model_(model), tok_(tokenizer), engine_(engine), opts_(options), on_end_(std::move(on_end)),
      policy_(MakeWaitingPolicy(options.kind, engine, options.window, options.prefetch)) {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tierkv-sched");
    Loop();
  });
}

Scheduler::~Scheduler() { Shutdown(std::chrono::milliseconds(0)); }

Status Scheduler::Submit(std::shared_ptr<Job> job) {
  const std::shared_ptr<Job> queued = job;
  std::shared_ptr<Job> evicted;
  {
    MutexLock l(&mu_);
    if (draining_) return Status::Unavailable("the server is shutting down");
    // Counted with the running jobs: a burst that arrives while the thread
    // prefills is bound for free slots (it counted against max_queue alone,
    // and 7 of 24 were refused with 16 places and 8 slots).
    const bool full = queue_.size() + waiting_count_ + running_count_ >= opts_.max_queue + opts_.max_running;
    RETURN_IF_ERROR(queue_.Push(std::move(job), opts_.max_queue, full, &evicted));
    // Its remote lookups run while it waits (null without a remote tier);
    // set under mu_, so the thread cannot take it before. The remote
    // tier's queue lock is taken under mu_, never the other way.
    queued->set_ahead(engine_->FetchAhead(queued->params().prompt, queued->params().cache_namespace));
    cv_.SignalAll();
  }
  if (evicted) {
    Outcome o;
    o.reason = FinishReason::kError;
    o.status = Status::ResourceExhausted(
        "the queue is full and this API key held more than its share of it: another key's request took "
        "this one's place");
    evicted->End(std::move(o));
  }
  return Status::Ok();
}

void Scheduler::Drain(std::chrono::milliseconds grace) {
  MutexLock l(&mu_);
  if (draining_) {
    deadline_ = std::min(deadline_, Clock::now() + grace);
  } else {
    draining_ = true;
    deadline_ = Clock::now() + grace;
  }
  cv_.SignalAll();
}

void Scheduler::Shutdown(std::chrono::milliseconds grace) {
  Drain(grace);
  if (thread_.joinable()) thread_.join();
}

size_t Scheduler::queued() const {
  MutexLock l(&mu_);
  return queue_.size() + waiting_count_;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  for (int i = 0; i < 3; ++i) s.started[i] = started_[i];
  s.prefetch = policy_->prefetch_stats();
  return s;
}

std::vector<std::shared_ptr<Job>> Scheduler::TakeArrivals(bool past_deadline) {
  std::vector<std::shared_ptr<Job>> out;
  const size_t room = policy_->Room(running_.size(), opts_.max_running);
  std::map<uint32_t, size_t> running;  // by tenant, with those taken now
  for (const auto& r : running_) ++running[r->job->params().tenant];
  // Past the deadline every job leaves (to be cancelled), ready or not.
  while (!queue_.empty() && (past_deadline || out.size() < room)) {
    std::shared_ptr<Job> job = queue_.Take(running, /*any=*/past_deadline);
    if (!job) break;  // the rest are still fetching ahead
    out.push_back(std::move(job));
    // Under mu_: queued() + running() never drops a job between them.
    ++(policy_->keeps_waiting() ? waiting_count_ : running_count_);
  }
  return out;
}

void Scheduler::Loop() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> arrived;
    bool past_deadline = false;
    {
      MutexLock l(&mu_);
      while (!queue_.AnyReady() && policy_->size() == 0 && running_.empty()) {
        if (draining_ && (queue_.empty() || Clock::now() >= deadline_)) break;
        // Jobs still fetching ahead: looked at again shortly (the remote
        // tier's thread does not signal this one).
        if (queue_.empty()) {
          cv_.Wait(&mu_);
        } else {
          cv_.WaitFor(&mu_, std::chrono::milliseconds(2));
        }
      }
      if (draining_ && queue_.empty() && policy_->size() == 0 && running_.empty()) return;
      past_deadline = draining_ && Clock::now() >= deadline_;
      arrived = TakeArrivals(past_deadline);
    }
    const auto t0 = Clock::now();
    if (past_deadline) {
      for (auto& job : arrived) job->Cancel();
      policy_->CancelAll();
    }
    RunPolicy(std::move(arrived), past_deadline);
    if (past_deadline) {
      for (auto& r : running_) r->job->Cancel();
    }
    StepAll();
    if (!running_.empty()) {
      const double ms = MsSince(t0);
      round_ms_ = round_ms_ <= 0 ? ms : 0.8 * round_ms_ + 0.2 * ms;
    }
  }
}

void Scheduler::RunPolicy(std::vector<std::shared_ptr<Job>> arrived, bool past_deadline) {
  policy_->Arrive(std::move(arrived));
  // Asked again after every start: a job that ends as it starts (an error,
  // a stop on its first token) leaves its slot to the next at once.
  const auto slot_free = [&] { return past_deadline || running_.size() < opts_.max_running; };
  policy_->BeginRound(slot_free());
  while (std::optional<Release> rel = policy_->Next(slot_free())) {
    if (policy_->keeps_waiting()) {
      ++running_count_;  // before leaving the policy: never counted in neither
      --waiting_count_;
    }
    Start(std::move(*rel));
  }
  policy_->AfterStarts(SlotFreeMs());
}

double Scheduler::SlotFreeMs() const {
  double least = std::numeric_limits<double>::infinity();
  for (const auto& r : running_) {
    const size_t left = static_cast<size_t>(r->job->params().max_tokens) - r->out.completion_tokens;
    least = std::min(least, round_ms_ * static_cast<double>(left));
  }
  // Decided once a round: due if the slot frees before the next decision
  // plus the transfer, else it would come a round late.
  return least - round_ms_;
}

void Scheduler::Start(Release rel) {
  auto r = std::make_unique<Running>(rel.job->params());
  r->job = std::move(rel.job);
  r->out.queue_ms = MsSince(r->job->arrival());
  r->events = rel.located && policy_->raises_events();
  r->where = std::move(rel.where);
  r->out.prefetched = rel.prefetched;
  if (r->job->cancelled()) return End(*r, FinishReason::kCancelled);
  const GenerationParams& p = r->job->params();
  // A locating policy (car) found where its prefix was; otherwise that is learnt
  // from the prefill's reads (Serve looks it up once).
  if (r->events) Counted(*r, rel.entered_as, r->where.place);
  engine::ServeOptions so;
  so.keep_kv = true;
  so.scheduler_events = r->events;
  so.retention = p.retention;
  so.cache_namespace = p.cache_namespace;
  so.remote_lookup = !r->job->fetched_ahead();
  so.store_behind = true;  // a slow disk holds the store writer, never this thread
  if (r->events) engine_->OnSchedulerEvent(r->where, engine::SchedulerEvent::kStart);
  r->served = true;
  auto served = engine_->Serve(p.prompt, so);
  if (!r->events) {
    const engine::PrefixPlace at =
        served.ok() ? engine_->PlaceServed(served->stats) : engine::PrefixPlace::kNone;
    Counted(*r, at, at);
  }
  if (!served.ok()) return End(*r, FinishReason::kError, served.status());
  r->out.prefill = served->stats;
  r->seq = std::move(served->sequence);
  r->logits = std::move(served->logits);
  r->prev = p.prompt.back();
  if (Decide(*r)) running_.push_back(std::move(r));
}

void Scheduler::Counted(Running& r, engine::PrefixPlace waited, engine::PrefixPlace started) {
  r.out.waited_as = waited;
  r.out.started_as = started;
  ++started_[static_cast<int>(started)];
}

void Scheduler::StepAll() {
  // Cancelled jobs end before the pass, not after it.
  for (auto& r : running_) {
    if (r->job->cancelled()) {
      End(*r, FinishReason::kCancelled);
      r.reset();
    }
  }
  std::erase(running_, nullptr);
  if (running_.empty()) return;
  std::vector<Sequence*> seqs;
  std::vector<int32_t> tokens;
  for (auto& r : running_) {
    seqs.push_back(r->seq.get());
    tokens.push_back(r->prev);
  }
  auto logits = Sequence::StepBatch(model_, seqs, tokens);
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = *running_[i];
    if (!logits.ok()) {
      End(r, FinishReason::kError, logits.status());
      running_[i].reset();
      continue;
    }
    r.logits = std::move((*logits)[i]);
    if (!Decide(r)) running_[i].reset();
  }
  std::erase(running_, nullptr);
}

bool Scheduler::Decide(Running& r) {
  const GenerationParams& p = r.job->params();
  if (r.job->cancelled()) {
    End(r, FinishReason::kCancelled);
    return false;
  }
  const int32_t next = r.sampler.Sample(r.logits);
  if (r.out.completion_tokens == 0) {
    r.first_token = Clock::now();
    r.out.ttft_ms = MsBetween(r.job->arrival(), r.first_token);
  }
  if (!p.ignore_eos && (next == tok_.eos_id() || next == tok_.bos_id() ||
                       std::find(p.stop_tokens.begin(), p.stop_tokens.end(), next) != p.stop_tokens.end())) {
    End(r, FinishReason::kStop);
    return false;
  }
  ++r.out.completion_tokens;
  const bool stopped = r.text.Append(tok_.DecodePiece(r.prev, next));
  r.prev = next;
  if (stopped) {
    End(r, FinishReason::kStop);
    return false;
  }
  if (const std::string_view ready = r.text.TakeReady(); !ready.empty()) r.job->Emit(ready);
  if (r.out.completion_tokens >= static_cast<size_t>(p.max_tokens) ||
      r.seq->position() >= model_.config().context_length) {
    End(r, FinishReason::kLength);
    return false;
  }
  return true;  // r.prev runs in the next pass
}

void Scheduler::End(Running& r, FinishReason reason, Status status) {
  if (reason == FinishReason::kError) {
    TIERKV_LOG(kWarn) << "request failed: " << status.ToString();
  }
  // The text held back for a stop string that did not come is the job's.
  if (reason != FinishReason::kCancelled) {
    if (const std::string_view rest = r.text.TakeRest(); !rest.empty()) r.job->Emit(rest);
  }
  r.out.reason = reason;
  r.out.status = std::move(status);
  if (r.out.completion_tokens > 0) r.out.decode_ms = MsSince(r.first_token);
  r.seq.reset();
  if (r.events) {
    engine_->OnSchedulerEvent(r.where, r.served ? engine::SchedulerEvent::kFinish
                                                : engine::SchedulerEvent::kLeaveWindow);
  }
  if (on_end_) on_end_(r.out, MsSince(r.job->arrival()) / 1000);
  // Before the job ends: whoever saw its end never sees it still running.
  --running_count_;
  r.job->End(std::move(r.out));
}

}  // namespace tierkv::sched
