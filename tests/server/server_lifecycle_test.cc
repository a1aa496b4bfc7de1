// Server's lifecycle, in process: Shutdown stops Run whenever it comes, before
// Run is called, while Run is entering httplib's listen loop, or while it
// serves. (cpp-httplib 0.11's stop() does nothing until its listen loop has
// begun, so a signal right after the "serving" line could be lost and the
// process never end; a CI run hung there for 900 s.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "engine/model_fixture.h"
#include "store/kv_fixture.h"
#include "tierkv/engine.h"
#include "tierkv/server.h"

namespace tierkv::server {
namespace {

using namespace std::chrono_literals;

class ServerLifecycleTest : public engine::DefaultModelTest {
 protected:
  void SetUp() override {
    auto tok = LoadTokenizerFor(*model_, "");
    ASSERT_TRUE(tok.ok());
    tok_ = std::move(tok).value();
    engine::EngineOptions o;
    o.cache_dir = dir_.path();
    o.disk.calibrate_io = false;
    auto e = engine::Engine::Open(*model_, o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void TearDown() override { engine_.reset(); }  // the store closes before dir_ goes

  std::unique_ptr<Server> NewBoundServer() {
    ServerOptions so;
    so.port = 0;
    so.grace_ms = 0;
    // Few HTTP workers (httplib starts them all at listen): rounds stay cheap under TSan.
    so.max_queue = 1;
    so.max_running = 1;
    auto s = Server::Create(*model_, *tok_, engine_.get(), so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    auto port = (*s)->Bind();
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    return std::move(s).value();
  }

  // Runs `srv` on a thread of its own, calls Shutdown `delay` later (a
  // negative delay: before Run starts), and expects Run to return Ok within a
  // minute (a hang would otherwise last until ctest's timeout: the process
  // ends here naming the case).
  static void RunAndShutdown(Server* srv, std::chrono::microseconds delay, int round) {
    if (delay.count() < 0) srv->Shutdown();
    std::promise<Status> ran;
    auto done = ran.get_future();
    std::thread runner([&] { ran.set_value(srv->Run()); });
    if (delay.count() >= 0) {
      std::this_thread::sleep_for(delay);
      srv->Shutdown();
    }
    if (done.wait_for(60s) != std::future_status::ready) {
      std::fprintf(stderr, "round %d: Run did not return within 60 s of Shutdown (delay %lld us)\n",
                   round, static_cast<long long>(delay.count()));
      std::_Exit(1);
    }
    runner.join();
    const Status s = done.get();
    EXPECT_TRUE(s.ok()) << "round " << round << ": " << s.ToString();
  }

  store::testing::TempDir dir_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<engine::Engine> engine_;
};

TEST_F(ServerLifecycleTest, ShutdownBeforeRunMakesRunReturn) {
  auto srv = NewBoundServer();
  ASSERT_NE(srv, nullptr);
  RunAndShutdown(srv.get(), std::chrono::microseconds(-1), 0);
}

// Shutdown at once and at small delays after Run's thread starts: the window
// between Run's call and httplib's loop is hit in some of these rounds.
TEST_F(ServerLifecycleTest, ShutdownRightAfterRunStartsStopsIt) {
  for (int round = 0; round < 200; ++round) {
    auto srv = NewBoundServer();
    ASSERT_NE(srv, nullptr);
    RunAndShutdown(srv.get(), std::chrono::microseconds(round % 10 * 20), round);
  }
}

TEST_F(ServerLifecycleTest, ShutdownWhileServingStopsIt) {
  auto srv = NewBoundServer();
  ASSERT_NE(srv, nullptr);
  RunAndShutdown(srv.get(), 200ms, 0);
}

}  // namespace
}  // namespace tierkv::server
