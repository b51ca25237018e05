// Grammars kept with the prefix cache (--prefix-cache-dir DIR): the inputs of every grammar a
// request compiled (its tools, tool_choice and parallel_tool_calls, or its response_format) are
// recorded in DIR/grammars/, a small file each named by the SHA-256 of its contents, and a
// restarted server compiles them again before it reports ready. An agent's first turn after a
// restart then finds its tools' grammar compiled, as its prompt is found in the disk tier.
// Inputs, not compiled tables, are what is kept: the compile depends on the vocabulary, the
// grammar options and the context length, which a restarted server may change, and re-compiling
// is what makes a record from another server harmless. Bounded: the newest kMaxRecords files,
// each at most kMaxRecordBytes.
#pragma once

#include <string>

#include "server/structured_output.h"

namespace mimo {

class GrammarRecords {
 public:
  static constexpr int kMaxRecords = 64;  // as many as the grammar cache keeps
  static constexpr size_t kMaxRecordBytes = size_t{8} << 20;

  // dir: the prefix-cache directory (the records go under dir/grammars); empty: off.
  explicit GrammarRecords(std::string dir);
  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  // Records the grammar inputs of a request whose grammar just compiled (once per distinct
  // input; the oldest records beyond kMaxRecords removed). Failures are logged and ignored.
  void Record(const ConstraintRequest& r) const;
  // Compiles every record into m's grammar cache, newest first; records that no longer parse or
  // compile are removed. Returns how many compiled.
  int CompileAll(const ServingModel& m) const;

 private:
  std::string dir_;  // DIR/grammars
};

}  // namespace mimo
