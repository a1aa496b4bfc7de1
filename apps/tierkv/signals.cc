#include "signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "tierkv/mutex.h"

namespace tierkv::app {
namespace {

Mutex& ScratchMu() {
  static Mutex mu;
  return mu;
}
// The registered directories; guarded by ScratchMu().
std::set<std::string>& Scratch() {
  static std::set<std::string> dirs;
  return dirs;
}

// The command's shutdown handler; guarded by ScratchMu().
std::function<void()>& ShutdownHandler() {
  static std::function<void()> handler;
  return handler;
}

sigset_t Handled() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void InstallSignalCleanup() {
  sigset_t set = Handled();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    pthread_setname_np(pthread_self(), "tierkv-signal");
    int sig = 0;
    bool handled = false;
    for (;;) {
      if (sigwait(&set, &sig) != 0) return;
      std::function<void()> handler;
      {
        MutexLock l(&ScratchMu());
        handler = ShutdownHandler();
      }
      if (handler && !handled) {
        handled = true;
        handler();
        continue;
      }
      break;
    }
    {
      MutexLock l(&ScratchMu());
      for (const std::string& dir : Scratch()) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
    }
    _exit(128 + sig);
  }).detach();
}

void SetShutdownHandler(std::function<void()> handler) {
  MutexLock l(&ScratchMu());
  ShutdownHandler() = std::move(handler);
}

void RegisterScratch(const std::string& dir) {
  MutexLock l(&ScratchMu());
  Scratch().insert(dir);
}

void UnregisterScratch(const std::string& dir) {
  MutexLock l(&ScratchMu());
  Scratch().erase(dir);
}

}  // namespace tierkv::app
