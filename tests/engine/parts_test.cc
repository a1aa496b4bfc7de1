// The engine's parts alone, without a model: the system table, the pools'
// entry format and keys, the load queue's order, request statistics, the
// maintenance timer.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "engine/all_rows_source.h"
#include "engine/io_counts.h"
#include "engine/load_queue.h"
#include "engine/periodic_task.h"
#include "engine/pool_entries.h"
#include "engine/probe_source.h"
#include "engine/speculation.h"
#include "engine/system_table.h"
#include "testing/status_matchers.h"

namespace tierkv::engine {
namespace {

using ::tierkv::testing::StatusIs;

TEST(SystemTableTest, EverySystemHasItsRowAndNameAndParsesBack) {
  std::set<std::string_view> names;
  for (System s : AllSystems()) {
    const SystemRow& row = RowOf(s);
    EXPECT_EQ(row.system, s);
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    ASSERT_OK_AND_ASSIGN(System parsed, ParseSystem(row.name));
    EXPECT_EQ(parsed, s);
  }
  EXPECT_EQ(names.size(), SystemTable().size());
  const std::set<MakeSourceFn> known = {&SourceOf<AllRowsSource>, &SourceOf<H2oSource>,
                                        &SourceOf<SpeculatingSource>, &SourceOf<ProbeSource>};
  for (const SystemRow& row : SystemTable()) {
    // A row reuses exactly when it has a source; a row with one of the
    // sources here has the one its selection and speculation describe (the
    // prompt writer and the bench read those fields). A policy with a source
    // of its own (a new file pair) is held to the first rule only.
    EXPECT_EQ(row.make_source == nullptr, row.selection == Selection::kNone) << row.name;
    if (!known.contains(row.make_source)) continue;
    const MakeSourceFn expected = row.selection == Selection::kAllRows ? &SourceOf<AllRowsSource>
                                  : row.selection == Selection::kH2o   ? &SourceOf<H2oSource>
                                  : row.speculates                     ? &SourceOf<SpeculatingSource>
                                                                       : &SourceOf<ProbeSource>;
    EXPECT_EQ(row.make_source, expected) << row.name;
  }
  EXPECT_THAT(ParseSystem("impres").status(), StatusIs(StatusCode::kInvalidArgument, "known: recompute"));
}

TEST(SystemTableTest, RowsSayWhatThePapersConfigure) {
  EXPECT_FALSE(RowOf(System::kRecompute).reuses());
  EXPECT_EQ(RowOf(System::kAsLike).selection, Selection::kAllRows);
  EXPECT_FALSE(RowOf(System::kAsLike).selective());
  for (System s : {System::kAsH2oLru, System::kAsH2oLfu, System::kCar}) {
    EXPECT_EQ(RowOf(s).selection, Selection::kH2o) << SystemName(s);
  }
  for (System s : {System::kImpressItf, System::kImpressRo, System::kImpress, System::kSpec}) {
    EXPECT_EQ(RowOf(s).selection, Selection::kProbeHeads) << SystemName(s);
    EXPECT_TRUE(RowOf(s).selective());
  }
  // IMPRESS's ablation: +ITF alone, +RO reports importance, all adds score pools.
  EXPECT_FALSE(RowOf(System::kImpressItf).reports_importance);
  EXPECT_TRUE(RowOf(System::kImpressRo).reports_importance);
  EXPECT_EQ(RowOf(System::kImpressRo).default_policy, cache::PolicyKind::kLru);
  EXPECT_EQ(RowOf(System::kImpress).default_policy, cache::PolicyKind::kScore);
  // spec is impress plus speculation; car is H2O with a profile, events and its policy.
  EXPECT_TRUE(RowOf(System::kSpec).speculates);
  EXPECT_TRUE(RowOf(System::kSpec).reports_importance);
  int speculating = 0, profiled = 0, events = 0;
  for (const SystemRow& row : SystemTable()) {
    speculating += row.speculates;
    profiled += row.retention == RetentionFrom::kProfile;
    events += row.score_events;
  }
  EXPECT_EQ(speculating, 1);
  EXPECT_EQ(profiled, 1);
  EXPECT_EQ(events, 1);
  EXPECT_EQ(RowOf(System::kCar).retention, RetentionFrom::kProfile);
  EXPECT_TRUE(RowOf(System::kCar).score_events);
  EXPECT_EQ(RowOf(System::kCar).default_policy, cache::PolicyKind::kCar);
  EXPECT_EQ(RowOf(System::kAsH2oLfu).default_policy, cache::PolicyKind::kLfu);
  // The public traits are the row's.
  EXPECT_TRUE(TraitsOf(System::kCar).profiled);
  EXPECT_TRUE(TraitsOf(System::kSpec).speculates);
  EXPECT_FALSE(TraitsOf(System::kRecompute).reuses);
  EXPECT_TRUE(TraitsOf(System::kImpress).reorders);
  // The first write's order: the reordering systems and car (CaR decides at
  // store time), not the baselines or IMPRESS's +ITF step.
  for (const SystemRow& row : SystemTable()) {
    const bool want = row.reports_importance || row.system == System::kCar;
    EXPECT_EQ(row.orders_at_store, want) << row.name;
  }
}

TEST(EngineOptionsTest, NamesParseAndBadOnesNameTheField) {
  ASSERT_OK_AND_ASSIGN(PoolPolicy p, ParsePoolPolicy("score"));
  EXPECT_EQ(p, PoolPolicy::kScore);
  EXPECT_EQ(PoolPolicyName(p), "score");
  EXPECT_THAT(ParsePoolPolicy("mru").status(), StatusIs(StatusCode::kInvalidArgument, "policy"));
  ASSERT_OK_AND_ASSIGN(Aggregation a, ParseAggregation("vote"));
  EXPECT_EQ(AggregationName(a), "vote");
  EngineOptions o;
  o.cache_dir = "/tmp/x";
  EXPECT_OK(o.Validate());
  o.retention = 1.5;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "retention"));
  o = EngineOptions{};
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "cache_dir"));
  o.system = System::kRecompute;
  EXPECT_OK(o.Validate());  // recompute stores nothing
  for (const char* name : {"auto", "token", "page", "block:16", "block:1", "block:4096"}) {
    ASSERT_OK_AND_ASSIGN(SelectionUnit u, ParseSelectionUnit(name));
    EXPECT_EQ(SelectionUnitName(u), name);
  }
  for (const char* bad : {"", "pages", "block:", "block:0", "block:4097", "block:-3", "block:1x"}) {
    EXPECT_THAT(ParseSelectionUnit(bad).status(), StatusIs(StatusCode::kInvalidArgument, "block:N")) << bad;
  }
  for (const char* name : {"off", "8", "64:0", "0:16", "256", "3:256"}) {
    ASSERT_OK_AND_ASSIGN(ScorePool p, ParseScorePool(name));
    EXPECT_EQ(ScorePoolName(p), name);
  }
  EXPECT_EQ(*ParseScorePool("0"), ScorePool{});
  EXPECT_EQ(*ParseScorePool("0:0"), ScorePool{});
  EXPECT_EQ(*ParseScorePool("64:0"), (ScorePool{64, 0}));
  for (const char* bad : {"", ":", "8:", ":8", "257", "1:257", "-1", "8:8:8", "x", "1000", "0x10"}) {
    EXPECT_THAT(ParseScorePool(bad).status(), StatusIs(StatusCode::kInvalidArgument, "B:A")) << bad;
  }
  EngineOptions pooled = o;
  pooled.score_pool = ScorePool{0, kMaxScorePool + 1};
  EXPECT_THAT(pooled.Validate(), StatusIs(StatusCode::kInvalidArgument, "score_pool"));
  // auto: at retention 0.25 and below, blocks of up to 64 tokens while a
  // layer keeps 8 of them (512-byte rows: 8 per page), pages above 0.25 or when
  // blocks would be no larger; the others are themselves anywhere.
  const SelectionUnit automatic{Granularity::kAuto};
  EXPECT_EQ(EngineOptions{}.unit, automatic);
  EXPECT_EQ(ResolveUnit(automatic, 0.25, 2560, 512), (SelectionUnit{Granularity::kBlock, 64}));  // keeps 640
  EXPECT_EQ(ResolveUnit(automatic, 0.1, 2560, 512), (SelectionUnit{Granularity::kBlock, 32}));   // keeps 256
  EXPECT_EQ(ResolveUnit(automatic, 0.25, 640, 512), (SelectionUnit{Granularity::kBlock, 16}));   // keeps 160
  EXPECT_EQ(ResolveUnit(automatic, 0.25, 320, 512), SelectionUnit{Granularity::kPage});          // keeps 80
  EXPECT_EQ(ResolveUnit(automatic, 0.25, 2560, 64), SelectionUnit{Granularity::kPage});        // 64-byte rows: 64 a page
  EXPECT_EQ(ResolveUnit(automatic, 0.5, 2560, 512), SelectionUnit{Granularity::kPage});
  EXPECT_EQ(ResolveUnit(SelectionUnit{Granularity::kToken}, 0.1, 2560, 512), SelectionUnit{Granularity::kToken});
  o.unit = SelectionUnit{Granularity::kBlock, 0};
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "block_tokens"));
  for (StoreOrder so : {StoreOrder::kSystem, StoreOrder::kOn, StoreOrder::kOff}) {
    ASSERT_OK_AND_ASSIGN(StoreOrder back, ParseStoreOrder(StoreOrderName(so)));
    EXPECT_EQ(back, so);
  }
  EXPECT_THAT(ParseStoreOrder("yes").status(), StatusIs(StatusCode::kInvalidArgument, "system, on, off"));
  for (SpecPredictor p : {SpecPredictor::kLayerSet, SpecPredictor::kQueries}) {
    ASSERT_OK_AND_ASSIGN(SpecPredictor back, ParseSpecPredictor(SpecPredictorName(p)));
    EXPECT_EQ(back, p);
  }
  EXPECT_THAT(ParseSpecPredictor("layer").status(), StatusIs(StatusCode::kInvalidArgument, "set, queries"));
  // The probes' recall target: auto by default, rising with the retention
  // to 0.9 at 0.5; a number in [0, 1] otherwise.
  EXPECT_EQ(EngineOptions{}.probe_recall, kProbeRecallAuto);
  EXPECT_DOUBLE_EQ(ProbeRecallFor(0.125), 0.6);
  EXPECT_DOUBLE_EQ(ProbeRecallFor(0.25), 0.7);
  EXPECT_DOUBLE_EQ(ProbeRecallFor(0.5), 0.9);
  EXPECT_DOUBLE_EQ(ProbeRecallFor(1.0), 0.9);
  ASSERT_OK_AND_ASSIGN(double auto_recall, ParseProbeRecall("auto"));
  EXPECT_EQ(auto_recall, kProbeRecallAuto);
  ASSERT_OK_AND_ASSIGN(double fixed_recall, ParseProbeRecall("0.85"));
  EXPECT_EQ(fixed_recall, 0.85);
  for (const char* bad : {"", "1.5", "-0.1", "0.8x", "nan"}) {
    EXPECT_THAT(ParseProbeRecall(bad).status(), StatusIs(StatusCode::kInvalidArgument, "auto or a number")) << bad;
  }
  o = EngineOptions{};
  o.cache_dir = "/tmp/x";
  o.probe_recall = 1.2;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "probe_recall"));
}

TEST(PoolEntriesTest, KeysDifferByKindAndLayerAndKeepTheWholeEntrySeed) {
  const uint64_t hash = 0x1234abcd;
  std::set<uint64_t> keys;
  for (EntryKind kind : {EntryKind::kWhole, EntryKind::kRows, EntryKind::kProbe}) {
    for (int l = 0; l < 32; ++l) EXPECT_TRUE(keys.insert(PoolKey(kind, hash, l)).second);
  }
  EXPECT_EQ(PoolKey(EntryKind::kWhole, hash, 3), XXH3_64bits_withSeed(&hash, sizeof hash, 4));
  EXPECT_NE(PoolKey(EntryKind::kRows, hash, 0), PoolKey(EntryKind::kRows, hash + 1, 0));
}

TEST(PoolEntriesTest, ARowEntryHoldsExactlyItsRows) {
  const size_t rb = 6;
  auto bytes = [](char tag, uint16_t r) {
    static thread_local char buf[6];
    std::memset(buf, tag, sizeof buf);
    buf[0] = static_cast<char>(r);
    return static_cast<const char*>(buf);
  };
  const std::vector<uint16_t> krows = {1, 5, 9}, vrows = {5};
  cache::Buffer e = BuildRowEntry(krows, vrows, rb, [&](uint16_t r) { return bytes('k', r); },
                                  [&](uint16_t r) { return bytes('v', r); });
  EXPECT_EQ(e->size(), RowEntryHeaderBytes(3, 1) + 4 * rb);
  EXPECT_EQ(RowEntryHeaderBytes(3, 1) % 8, 0u);
  const RowEntryView v = ParseRowEntry(*e, rb);
  ASSERT_EQ(v.krows.size(), 3u);
  ASSERT_EQ(v.vrows.size(), 1u);
  for (uint16_t r : krows) {
    ASSERT_NE(v.K(r, rb), nullptr);
    EXPECT_EQ(v.K(r, rb)[0], static_cast<char>(r));
    EXPECT_EQ(v.K(r, rb)[1], 'k');
  }
  EXPECT_EQ(v.K(2, rb), nullptr);
  EXPECT_EQ(v.V(1, rb), nullptr);
  ASSERT_NE(v.V(5, rb), nullptr);
  EXPECT_EQ(v.V(5, rb)[1], 'v');
  EXPECT_EQ(UnionRows(krows, std::vector<uint16_t>{0, 5, 10}), (std::vector<uint16_t>{0, 1, 5, 9, 10}));
}

TEST(LoadQueueTest, ServesTheNearestLayerFirstThenInSubmissionOrder) {
  LoadQueue q;  // not started: jobs wait, and the test drains them itself
  std::vector<std::string> order;
  q.Submit(3, [&] { order.push_back("3a"); });
  q.Submit(1, [&] { order.push_back("1a"); });
  q.Submit(1, [&] { order.push_back("1b"); });
  q.Submit(0, [&] { order.push_back("0a"); });
  q.Submit(3, [&] { order.push_back("3b"); });
  q.TEST_Drain();
  EXPECT_EQ(order, (std::vector<std::string>{"0a", "1a", "1b", "3a", "3b"}));
}

TEST(LoadQueueTest, AFetchPublishesItsBuffersCountsAndStatusOnTheLoadThread) {
  LoadQueue q;
  q.Start();
  const auto t0 = Clock::now();
  auto ok = q.Read(t0, 0, [](Fetch& f, IoCounts* io) {
    f.k = "keys";
    io->bytes = 4096;
    io->records = 1;
    return Status::Ok();
  });
  auto bad = q.Read(t0, 1, [](Fetch&, IoCounts*) { return Status::Corruption("page 1"); }, {7, 9});
  double waited = 0;
  EXPECT_OK(Await(*ok, &waited));
  EXPECT_EQ(ok->k, "keys");
  EXPECT_EQ(ok->io.bytes, 4096u);
  EXPECT_GE(ok->completed_ms, ok->issued_ms);
  EXPECT_GE(waited, 0);
  EXPECT_THAT(Await(*bad), StatusIs(StatusCode::kCorruption, "page 1"));
  EXPECT_EQ(bad->rows, (std::vector<int32_t>{7, 9}));
  q.Stop();
  q.Stop();  // idempotent
}

TEST(RequestStatsTest, CountsAddUpAndFillTheRequestsStatistics) {
  IoCounts a, b;
  a.Hit(cache::Tier::kDevice);
  a.FromPool(cache::Tier::kDevice, 100);
  a.Hit(cache::Tier::kHost);
  a.FromPool(cache::Tier::kHost, 50);
  b.disk_reads = 2;
  b.bytes = 8192;
  b.records = 3;
  a.Add(b);
  RequestStats st;
  a.FillStats(&st);
  EXPECT_EQ(st.device_hits, 1u);
  EXPECT_EQ(st.host_hits, 1u);
  EXPECT_EQ(st.disk_reads, 2u);
  EXPECT_EQ(st.device_bytes_read, 100u);
  EXPECT_EQ(st.host_bytes_read, 50u);
  EXPECT_EQ(st.disk_bytes_read, 8192u);
  EXPECT_EQ(st.disk_chunks_read, 3u);
  EXPECT_DOUBLE_EQ(st.device_hit_ratio(), 0.25);
  EXPECT_DOUBLE_EQ(RequestStats{}.device_hit_ratio(), 0.0);
}

TEST(PeriodicTaskTest, RunsEveryIntervalAndStopsPromptly) {
  std::atomic<int> runs{0};
  PeriodicTask t;
  t.Start("test-periodic", std::chrono::milliseconds(5), [&] { ++runs; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (runs < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(runs.load(), 3);
  const auto a = std::chrono::steady_clock::now();
  t.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - a, std::chrono::seconds(5));
  const int after = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(runs.load(), after);
}

}  // namespace
}  // namespace tierkv::engine
