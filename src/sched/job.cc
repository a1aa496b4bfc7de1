#include "sched/job.h"

namespace tierkv::sched {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

Job::Job(GenerationParams params) : params_(std::move(params)), arrival_(Clock::now()) {}

bool Job::WaitUntil(Clock::time_point until) {
  const auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return false;
  cv_.WaitFor(&mu_, left);
  return true;
}

std::string Job::Next(std::chrono::milliseconds wait, bool* ended) {
  const Clock::time_point until = Clock::now() + wait;
  MutexLock l(&mu_);
  while (taken_ == text_.size() && !ended_ && WaitUntil(until)) {
  }
  std::string out = text_.substr(taken_);
  taken_ = text_.size();
  *ended = ended_;
  return out;
}

bool Job::WaitFor(std::chrono::milliseconds wait) {
  const Clock::time_point until = Clock::now() + wait;
  MutexLock l(&mu_);
  while (!ended_ && WaitUntil(until)) {
  }
  return ended_;
}

Outcome Job::Wait() {
  MutexLock l(&mu_);
  while (!ended_) cv_.Wait(&mu_);
  return outcome_;
}

void Job::Emit(std::string_view text) {
  if (text.empty()) return;
  MutexLock l(&mu_);
  text_ += text;
  cv_.SignalAll();
}

void Job::End(Outcome o) {
  MutexLock l(&mu_);
  o.text = text_;
  outcome_ = std::move(o);
  ended_ = true;
  cv_.SignalAll();
}

}  // namespace tierkv::sched
