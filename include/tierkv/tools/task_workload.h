// Request files of `tierkv check`, `compare` and `bench`: JSON Lines, one
// request or one shared document per line (docs/workloads.md).
//   {"prefix": P, "query": Q}                        the minimal request
//   {"document": ID, "text": T}                      a document later lines reuse
//   {"prefix_doc": ID, "query": Q}                   a request whose prefix is that document
//   optional on a request: "id", "task" (accuracy is reported per task),
//   "choices": [C1, C2, ...] (at least two; each scored by the
//   log-likelihood of its tokens after prefix + query) and "label" (the
//   index of the right choice), or "answers": [A1, ...] (1 to 32 strings a
//   right greedy answer contains, RULER's string_match_all) with
//   "max_tokens" (the greedy answer's length, default 32); "length" and
//   "depth" label a request for reports (per task, length and depth).
// Errors name the file, the line and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tierkv/status.h"
#include "tierkv/tokenizer.h"

namespace tierkv::bench {

struct TaskRequest {
  std::string id;                 // the line's "id", else "line N"
  std::string task;               // "" when the line names none
  std::vector<int32_t> prefix;    // BOS + the prefix's tokens: what is stored and reused
  std::vector<int32_t> query;     // the query's tokens (at least one)
  std::vector<std::vector<int32_t>> choices;  // each choice's tokens (empty: no choices)
  int label = -1;                 // index into choices; -1: unlabelled
  // Generation tasks (no choices): the strings a right answer contains,
  // and how many tokens the greedy answer has at most.
  std::vector<std::string> answers;
  int max_tokens = 32;
  int length = 0;      // the request's nominal length in tokens (0: none given)
  double depth = -1;   // where its needle sits, in [0, 1] (-1: none given)
  std::vector<int32_t> Joined() const;  // prefix + query
};

// A depth as reports label it: "0.30" (two decimals).
std::string DepthLabel(double depth);

// Parses lines one at a time, remembering the documents defined so far.
class TaskWorkloadReader {
 public:
  explicit TaskWorkloadReader(const Tokenizer& tok) : tok_(tok) {}
  // One line; `where` (file and line) starts every error message. A request
  // line appends to requests(); a document line defines a document (a
  // second definition of one id is an error). InvalidArgument naming the
  // field, or JSON's own complaint.
  Status AddLine(const std::string& line, const std::string& where);
  std::vector<TaskRequest>& requests() { return requests_; }

 private:
  const Tokenizer& tok_;
  std::map<std::string, std::vector<int32_t>> documents_;  // id -> BOS + tokens
  std::vector<TaskRequest> requests_;
};

// Reads a whole file. Every request (BOS, prefix, query and its longest
// choice) must fit `context` tokens, the model's: a longer one is refused
// naming its line and the lengths. At least one request.
Result<std::vector<TaskRequest>> ReadTaskWorkload(const std::string& path, const Tokenizer& tok,
                                                  size_t context);

}  // namespace tierkv::bench
