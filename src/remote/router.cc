#include "remote/router.h"

#include <charconv>

#include "tierkv/logging.h"

namespace tierkv::remote {
namespace {

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), Redis Cluster's key hash.
uint16_t Crc16(std::string_view s) {
  uint16_t crc = 0;
  for (unsigned char ch : s) {
    crc ^= static_cast<uint16_t>(ch) << 8;
    for (int b = 0; b < 8; ++b) crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : static_cast<uint16_t>(crc << 1);
  }
  return crc;
}

// "MOVED 3999 127.0.0.1:6381" or "ASK ..." -> (slot, endpoint); false otherwise.
bool ParseRedirect(const Reply& r, std::string_view word, int* slot, Endpoint* to) {
  if (!r.is_error() || !std::string_view(r.str).starts_with(word)) return false;
  std::string_view s = std::string_view(r.str).substr(word.size());
  if (s.empty() || s[0] != ' ') return false;
  s.remove_prefix(1);
  const size_t sp = s.find(' ');
  if (sp == std::string_view::npos) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + sp, *slot);
  if (ec != std::errc() || *slot < 0 || *slot >= kClusterSlots) return false;
  auto ep = ParseRedisUrl("redis://" + std::string(s.substr(sp + 1)));
  if (!ep.ok()) return false;
  *to = ep->nodes[0];
  return true;
}

}  // namespace

uint16_t KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key) % kClusterSlots;
}

Router::Router(RedisUrl url, std::chrono::milliseconds timeout, TlsFiles tls, ReplyLimits limits)
    : url_(std::move(url)), timeout_(timeout), tls_(std::move(tls)), limits_(limits) {
  slots_.fill(-1);
}

Router::~Router() = default;

RedisConn* Router::Conn(const Endpoint& e) {
  auto& c = conns_[e.ToString()];
  if (!c) c = std::make_unique<RedisConn>(e, timeout_, Login::Of(url_, tls_), limits_);
  return c.get();
}

Endpoint Router::Owner(std::string_view key) const {
  if (url_.cluster && have_slots_) {
    const int16_t n = slots_[KeySlot(key)];
    if (n >= 0) return nodes_[static_cast<size_t>(n)];
  }
  return url_.nodes[0];
}

std::vector<Endpoint> Router::Servers() {
  if (!url_.cluster) return url_.nodes;
  RefreshSlots();
  return have_slots_ ? nodes_ : url_.nodes;
}

Status Router::RunOn(const Endpoint& e, std::span<const Command> commands, std::vector<Reply>* replies,
                     ErrorKind* kind) {
  return Conn(e)->Pipeline(commands, replies, kind);
}

void Router::RefreshSlots() {
  ++counters_.slot_refreshes;
  std::vector<Endpoint> candidates = nodes_;
  candidates.insert(candidates.end(), url_.nodes.begin(), url_.nodes.end());
  const Command cmd = {"CLUSTER", "SLOTS"};
  for (const Endpoint& e : candidates) {
    std::vector<Reply> r;
    ErrorKind kind;
    if (!Conn(e)->Pipeline(std::span(&cmd, 1), &r, &kind).ok()) continue;
    if (r[0].type != Reply::Type::kArray) continue;
    std::vector<Endpoint> nodes;
    std::array<int16_t, kClusterSlots> slots;
    slots.fill(-1);
    for (const Reply& range : r[0].elements) {
      if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) continue;
      const long long lo = range.elements[0].integer, hi = range.elements[1].integer;
      const Reply& master = range.elements[2];
      Endpoint owner{master.elements[0].str.empty() ? e.host : master.elements[0].str,
                     static_cast<int>(master.elements[1].integer)};
      size_t idx = 0;
      while (idx < nodes.size() && !(nodes[idx] == owner)) ++idx;
      if (idx == nodes.size()) nodes.push_back(owner);
      for (long long s = std::max(0LL, lo); s <= hi && s < kClusterSlots; ++s) slots[s] = static_cast<int16_t>(idx);
    }
    nodes_ = std::move(nodes);
    slots_ = slots;
    have_slots_ = true;
    return;
  }
  TIERKV_LOG(kDebug) << "remote: no cluster node answered CLUSTER SLOTS";
}

void Router::RunOne(const Command& c, Endpoint e, bool asking, Reply* reply, ErrorKind* error,
                    std::vector<Failure>* failures) {
  for (int hop = 0; hop < 4; ++hop) {
    std::vector<Command> cmds;
    if (asking) cmds.push_back({"ASKING"});
    cmds.push_back(c);
    std::vector<Reply> r;
    if (Status s = Conn(e)->Pipeline(cmds, &r, error); !s.ok()) {
      if (failures != nullptr) failures->push_back({*error, s.message(), Conn(e)->backed_off()});
      return;
    }
    *reply = std::move(r.back());
    int slot = 0;
    if (ParseRedirect(*reply, "MOVED", &slot, &e)) {
      ++counters_.moved;
      asking = false;
      RefreshSlots();
      continue;
    }
    if (ParseRedirect(*reply, "ASK", &slot, &e)) {
      ++counters_.asked;
      asking = true;
      continue;
    }
    *error = ErrorKind::kNone;
    return;
  }
  *error = ErrorKind::kReply;  // redirected in circles: a cluster mid-change
  if (failures != nullptr) failures->push_back({*error, "redirected more than three times (a cluster mid-change)"});
}

void Router::Run(std::span<const Command> commands, std::vector<Reply>* replies,
                 std::vector<ErrorKind>* errors, std::vector<Failure>* failures) {
  replies->assign(commands.size(), Reply{});
  errors->assign(commands.size(), ErrorKind::kNone);
  if (url_.cluster && !have_slots_) RefreshSlots();
  // One pipeline per server.
  std::map<std::string, std::pair<Endpoint, std::vector<size_t>>> by_server;
  for (size_t i = 0; i < commands.size(); ++i) {
    const Endpoint e = Owner(commands[i].size() > 1 ? std::string_view(commands[i][1]) : "");
    auto& slot = by_server[e.ToString()];
    slot.first = e;
    slot.second.push_back(i);
  }
  std::vector<size_t> redirected;
  for (auto& [name, group] : by_server) {
    std::vector<Command> batch;
    for (size_t i : group.second) batch.push_back(commands[i]);
    std::vector<Reply> r;
    ErrorKind kind;
    if (Status s = Conn(group.first)->Pipeline(batch, &r, &kind); !s.ok()) {
      for (size_t i : group.second) (*errors)[i] = kind;
      if (failures != nullptr) failures->push_back({kind, s.message(), Conn(group.first)->backed_off()});
      continue;
    }
    for (size_t j = 0; j < group.second.size(); ++j) {
      const size_t i = group.second[j];
      if (r[j].is_error() && (r[j].str.starts_with("MOVED ") || r[j].str.starts_with("ASK "))) {
        redirected.push_back(i);
      }
      (*replies)[i] = std::move(r[j]);
    }
  }
  bool refreshed = false;
  for (size_t i : redirected) {
    int slot = 0;
    Endpoint to;
    const bool ask = ParseRedirect((*replies)[i], "ASK", &slot, &to);
    if (!ask && !ParseRedirect((*replies)[i], "MOVED", &slot, &to)) {
      (*errors)[i] = ErrorKind::kReply;
      if (failures != nullptr) failures->push_back({ErrorKind::kReply, "a redirection that does not parse: " + (*replies)[i].str});
      continue;
    }
    if (ask) {
      ++counters_.asked;
    } else {
      ++counters_.moved;
      if (!refreshed) RefreshSlots();  // once per batch: one map answers every MOVED
      refreshed = true;
    }
    RunOne(commands[i], to, ask, &(*replies)[i], &(*errors)[i], failures);
  }
}

}  // namespace tierkv::remote
