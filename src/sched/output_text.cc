#include "sched/output_text.h"

#include <algorithm>

namespace tierkv::sched {
namespace {

// The longest tail of `text` that begins some stop string (it may still
// become one: not handed on yet).
size_t HeldBack(std::string_view text, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& s : stops) {
    if (s.empty()) continue;  // the server refuses "" (it would stop at once)
    for (size_t n = std::min(s.size() - 1, text.size()); n > held; --n) {
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        held = n;
        break;
      }
    }
  }
  return held;
}

// Where the first stop string begins in `text` (searching from `from`), or npos.
size_t FirstStop(std::string_view text, size_t from, const std::vector<std::string>& stops) {
  size_t at = std::string_view::npos;
  for (const std::string& s : stops) {
    if (!s.empty()) at = std::min(at, text.find(s, from));
  }
  return at;
}

}  // namespace

OutputText::OutputText(const std::vector<std::string>& stops) : stops_(stops) {
  for (const std::string& s : stops_) longest_stop_ = std::max(longest_stop_, s.size());
}

bool OutputText::Append(std::string_view piece) {
  const size_t before = text_.size();
  text_ += piece;
  // A stop string ending in the new piece begins at most longest_stop_ back.
  const size_t stop_at = FirstStop(text_, before > longest_stop_ ? before - longest_stop_ : 0, stops_);
  if (stop_at == std::string::npos) return false;
  text_.resize(std::max(stop_at, emitted_));
  return true;
}

std::string_view OutputText::TakeReady() {
  const size_t ready = text_.size() - HeldBack(text_, stops_);
  if (ready <= emitted_) return {};
  std::string_view out = std::string_view(text_).substr(emitted_, ready - emitted_);
  emitted_ = ready;
  return out;
}

std::string_view OutputText::TakeRest() {
  std::string_view out = std::string_view(text_).substr(std::min(emitted_, text_.size()));
  emitted_ = text_.size();
  return out;
}

}  // namespace tierkv::sched
