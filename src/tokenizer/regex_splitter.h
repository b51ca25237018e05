// RegexSplitter: the "Split" pre-tokenizer of HF tokenizers with behavior "Isolated" — the text
// is cut into the regex matches and the (rare) gaps between them, in order. Runs the pattern from
// tokenizer.json unchanged with PCRE2 (UTF + UCP, JIT-compiled when the library supports it),
// except the Qwen2 pattern, which has an equivalent hand-written matcher (qwen2_pre_tokenizer.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mimo {

// Immutable after Create; Split() is thread-safe (match data is per thread).
class RegexSplitter {
 public:
  static StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls fn(std::string_view piece) for each piece of `text` (valid UTF-8), covering all of it.
  template <typename Fn>
  void Split(std::string_view text, Fn&& fn) const {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t start, end;
      if (!NextMatch(text, pos, &start, &end)) {
        fn(text.substr(pos));
        return;
      }
      if (start > pos) fn(text.substr(pos, start - pos));
      fn(text.substr(start, end - start));
      pos = end;
    }
  }

  bool jit() const { return jit_; }
  // True when the pattern is the Qwen2 one and runs on the hand-written matcher.
  bool uses_qwen2_matcher() const { return qwen2_ && !force_pcre2_; }
  // Tests: run PCRE2 even for the Qwen2 pattern (the matcher's oracle).
  void set_force_pcre2(bool v) { force_pcre2_ = v; }

 private:
  RegexSplitter() = default;
  // Finds the first non-empty match at or after `pos`. False when there is none.
  bool NextMatch(std::string_view text, size_t pos, size_t* start, size_t* end) const;

  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  bool qwen2_ = false;
  bool force_pcre2_ = false;
  std::string pattern_;
};

}  // namespace mimo
