#include "store/io_backend.h"

#include "tierkv/mutex.h"

#include <liburing.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "store/format.h"
#include "tierkv/store.h"

namespace tierkv::store {

void AlignedFree::operator()(char* p) const { std::free(p); }

AlignedBuffer AllocateAligned(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + kBlockSize - 1) / kBlockSize * kBlockSize;
  return AlignedBuffer(static_cast<char*>(std::aligned_alloc(kBlockSize, rounded)));
}

namespace {

// Demand reads first, each group in the caller's order.
std::vector<size_t> IssueOrder(std::span<ReadOp> ops) {
  std::vector<size_t> order(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return !ops[i].prefetch; });
  return order;
}

// Reads one op with the file's own Read(), looping over short reads.
void ReadSync(ReadOp& op) {
  op.done = 0;
  op.status = Status::Ok();
  while (op.done < op.length) {
    Result<size_t> r = op.file->Read(op.offset + op.done, op.length - op.done, op.buf + op.done);
    if (!r.ok()) {
      op.status = r.status();
      return;
    }
    if (*r == 0) return;  // end of file
    op.done += *r;
  }
}

// pread on up to queue_depth threads: the caller and depth-1 workers take ops
// from a shared cursor, so that depth reads are in flight at once.
class PreadBackend final : public IoBackend {
 public:
  explicit PreadBackend(uint32_t depth) : IoBackend(depth) {
    for (uint32_t i = 1; i < depth; ++i) {
      workers_.emplace_back([this, i] {
        std::string name = "tierkv-pread-" + std::to_string(i);
        pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
        WorkerLoop();
      });
    }
  }
  ~PreadBackend() override {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    for (auto& t : workers_) t.join();
  }

  std::string_view name() const override { return "pread"; }

  Status Read(std::span<ReadOp> ops) override {
    order_ = IssueOrder(ops);
    {
      MutexLock l(&mu_);
      ops_ = ops;
      next_.store(0);
      active_ = workers_.size();
      ++generation_;
    }
    cv_.SignalAll();
    Drain();
    MutexLock l(&mu_);
    while (active_ != 0) done_cv_.Wait(&mu_);
    ops_ = {};
    return Status::Ok();
  }

 private:
  void Drain() {
    for (;;) {
      size_t i = next_.fetch_add(1);
      if (i >= ops_.size()) return;
      ReadSync(ops_[order_[i]]);
    }
  }

  void WorkerLoop() {
    uint64_t seen = 0;
    for (;;) {
      {
        MutexLock l(&mu_);
        while (!stop_ && generation_ == seen) cv_.Wait(&mu_);
        if (stop_) return;
        seen = generation_;
      }
      Drain();
      {
        MutexLock l(&mu_);
        --active_;
      }
      done_cv_.Signal();
    }
  }

  std::vector<std::thread> workers_;
  // Guards the batch hand-over: a batch is published by bumping generation_
  // (workers wake), and finished when active_ drops to 0.
  Mutex mu_;
  CondVar cv_, done_cv_;
  bool stop_ TIERKV_GUARDED_BY(mu_) = false;
  uint64_t generation_ TIERKV_GUARDED_BY(mu_) = 0;
  size_t active_ TIERKV_GUARDED_BY(mu_) = 0;
  // The batch: set before generation_ is bumped, read by Drain (workers saw
  // the bump under mu_), reset after active_ reached 0.
  std::span<ReadOp> ops_;
  std::vector<size_t> order_;
  std::atomic<size_t> next_{0};
};

Status UringError(const char* what, int neg_errno) {
  return Status::IOError(std::string("io_uring ") + what + ": " + std::strerror(-neg_errno));
}

class UringBackend final : public IoBackend {
 public:
  static Result<std::unique_ptr<IoBackend>> Create(uint32_t depth) {
    auto b = std::unique_ptr<UringBackend>(new UringBackend(depth));
    int r = io_uring_queue_init(depth, &b->ring_, 0);
    if (r < 0) {
      return Status::Unavailable(std::string("io_uring_queue_init: ") + std::strerror(-r));
    }
    b->ready_ = true;
    return std::unique_ptr<IoBackend>(std::move(b));
  }
  ~UringBackend() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }

  std::string_view name() const override { return "uring"; }

  Status RegisterBuffer(char* base, size_t bytes) override {
    if (!regions_.empty()) io_uring_unregister_buffers(&ring_);
    regions_.push_back(iovec{base, bytes});
    int r = io_uring_register_buffers(&ring_, regions_.data(), static_cast<unsigned>(regions_.size()));
    if (r < 0) {
      regions_.pop_back();
      return UringError("register_buffers", r);
    }
    return Status::Ok();
  }

  Status Read(std::span<ReadOp> ops) override {
    std::vector<size_t> order = IssueOrder(ops);
    size_t next = 0, in_flight = 0, finished = 0;
    for (ReadOp& op : ops) {
      op.done = 0;
      op.status = Status::Ok();
    }
    while (finished < ops.size()) {
      while (next < order.size() && in_flight < depth_) {
        size_t i = order[next++];
        if (ops[i].length == 0) {
          ++finished;
          continue;
        }
        if (ops[i].file->native_handle() < 0) {
          // Ops whose file has no descriptor are read synchronously, in order.
          ReadSync(ops[i]);
          ++finished;
          continue;
        }
        Submit(ops[i], i);
        ++in_flight;
      }
      if (in_flight == 0) continue;
      int r = io_uring_submit_and_wait(&ring_, 1);
      if (r < 0 && r != -EINTR) {
        // The ring is unusable: fail what is in flight.
        Status s = UringError("submit", r);
        for (size_t j = 0; j < ops.size(); ++j) {
          if (ops[j].status.ok() && ops[j].done < ops[j].length) ops[j].status = s;
        }
        return Status::Ok();
      }
      for (size_t i : Reap(ops, &in_flight, &finished)) {
        Submit(ops[i], i);
        ++in_flight;
      }
    }
    return Status::Ok();
  }

 private:
  // Queues the rest of `op` (index i) on the ring.
  void Submit(ReadOp& op, size_t i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    char* buf = op.buf + op.done;
    unsigned len = static_cast<unsigned>(op.length - op.done);
    uint64_t off = op.offset + op.done;
    int region = Region(buf, len);
    if (region >= 0) {
      io_uring_prep_read_fixed(sqe, op.file->native_handle(), buf, len, off, region);
    } else {
      io_uring_prep_read(sqe, op.file->native_handle(), buf, len, off);
    }
    io_uring_sqe_set_data64(sqe, i);
  }

  // Takes the completions: counts finished ops, records errors; returns the
  // ops to submit again (a short read's rest, EAGAIN, EINTR).
  std::vector<size_t> Reap(std::span<ReadOp> ops, size_t* in_flight, size_t* finished) {
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    std::vector<size_t> resubmit;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      size_t i = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
      ReadOp& op = ops[i];
      --*in_flight;
      if (cqe->res < 0) {
        if (cqe->res == -EAGAIN || cqe->res == -EINTR) {
          resubmit.push_back(i);
          continue;
        }
        op.status = Status::IOError("read at " + std::to_string(op.offset) + ": " + std::strerror(-cqe->res));
        ++*finished;
      } else if (cqe->res == 0) {
        ++*finished;  // end of file: op.done < op.length tells the caller
      } else {
        op.done += static_cast<size_t>(cqe->res);
        if (op.done < op.length) {
          resubmit.push_back(i);  // short read: ask for the rest
        } else {
          ++*finished;
        }
      }
    }
    io_uring_cq_advance(&ring_, seen);
    return resubmit;
  }

  explicit UringBackend(uint32_t depth) : IoBackend(depth) {}

  int Region(const char* buf, size_t len) const {
    for (size_t r = 0; r < regions_.size(); ++r) {
      const char* base = static_cast<const char*>(regions_[r].iov_base);
      if (buf >= base && buf + len <= base + regions_[r].iov_len) return static_cast<int>(r);
    }
    return -1;
  }

  io_uring ring_{};
  bool ready_ = false;
  std::vector<iovec> regions_;
};

}  // namespace

bool UringAvailable() {
  static const bool available = [] {
    io_uring ring;
    if (io_uring_queue_init(2, &ring, 0) < 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }();
  return available;
}

Result<std::unique_ptr<IoBackend>> NewIoBackend(std::string_view kind, IoOptions options) {
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return Status::InvalidArgument("io queue depth " + std::to_string(options.queue_depth) +
                                   " is outside 1..4096");
  }
  ASSIGN_OR_RETURN(const std::string name, ParseIoBackend(kind));
  if (name == "uring" || (name == "auto" && UringAvailable())) return UringBackend::Create(options.queue_depth);
  return std::unique_ptr<IoBackend>(new PreadBackend(options.queue_depth));
}

Result<std::string> ParseIoBackend(std::string_view name) {
  if (name == "auto" || name == "uring" || name == "pread") return std::string(name);
  return Status::InvalidArgument("unknown I/O backend '" + std::string(name) + "' (expected auto, uring or pread)");
}

}  // namespace tierkv::store
