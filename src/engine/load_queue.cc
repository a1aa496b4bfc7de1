#include "engine/load_queue.h"

#include <pthread.h>

#include <algorithm>

namespace tierkv::engine {

Status Await(Fetch& f, double* wait_ms) {
  const auto a = Clock::now();
  {
    MutexLock l(&f.mu);
    while (!f.done) f.cv.Wait(&f.mu);
  }
  if (wait_ms) *wait_ms += MsSince(a);
  return f.status;
}

LoadQueue::~LoadQueue() { Stop(); }

void LoadQueue::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void LoadQueue::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tierkv-load");
    Loop();
  });
}

void LoadQueue::Submit(int layer, std::function<void()> job) {
  {
    MutexLock l(&mu_);
    jobs_.push_back(Job{layer, next_seq_++, std::move(job)});
  }
  cv_.Signal();
}

bool LoadQueue::PopLocked(std::function<void()>* job) {
  if (jobs_.empty()) return false;
  auto next = std::min_element(jobs_.begin(), jobs_.end(), [](const Job& a, const Job& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.seq < b.seq;
  });
  *job = std::move(next->fn);
  jobs_.erase(next);
  return true;
}

void LoadQueue::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock l(&mu_);
      while (!stop_ && jobs_.empty()) cv_.Wait(&mu_);
      if (!PopLocked(&job)) return;  // stopping, nothing left
    }
    job();
  }
}

void LoadQueue::TEST_Drain() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock l(&mu_);
      if (!PopLocked(&job)) return;
    }
    job();
  }
}

std::shared_ptr<Fetch> LoadQueue::Read(Clock::time_point t0, int layer,
                                       std::function<Status(Fetch&, IoCounts*)> read,
                                       std::vector<int32_t> rows) {
  auto f = std::make_shared<Fetch>();
  f->rows = std::move(rows);
  f->issued_ms = MsSince(t0);
  Submit(layer, [f, t0, read = std::move(read)] {
    IoCounts io;
    Status s = read(*f, &io);
    MutexLock l(&f->mu);
    f->io = io;
    f->status = s;
    f->completed_ms = MsSince(t0);
    f->done = true;
    f->cv.SignalAll();
  });
  return f;
}

}  // namespace tierkv::engine
