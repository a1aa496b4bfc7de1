// A job's generated text on its way to the client: pieces appended as
// tokens are decided, stop strings found (also across pieces), and the tail
// that may still become a stop string held back from the stream until it
// either completes (cut) or cannot (handed on).
//
// Not thread-safe: the scheduler thread owns each running job's.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tierkv::sched {

class OutputText {
 public:
  // `stops` must outlive this (the job's parameters hold them); empty ones
  // are ignored.
  explicit OutputText(const std::vector<std::string>& stops);

  // Appends the next token's text. True when a stop string now appears: the
  // text ends before it (the stop string itself is never handed on).
  bool Append(std::string_view piece);
  // The text that can be handed on now (a possible stop string's beginning
  // held back); empty when there is none. Valid until the next call.
  std::string_view TakeReady();
  // All that was not handed on yet: at the end, the held-back tail of a stop
  // string that never came.
  std::string_view TakeRest();

  const std::string& text() const { return text_; }

 private:
  const std::vector<std::string>& stops_;
  size_t longest_stop_ = 0;  // how far back a new stop string may begin
  std::string text_;
  size_t emitted_ = 0;  // of text_, handed on
};

}  // namespace tierkv::sched
