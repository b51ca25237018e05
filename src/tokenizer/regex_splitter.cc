// PCRE2-backed regex splitting for the pre-tokenizer.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_splitter.h"

#include <pcre2.h>

#include "tokenizer/qwen2_pre_tokenizer.h"

namespace mimo {
namespace {

// Per-thread match data and JIT stack. Sized for the largest pattern seen by this thread.
struct ThreadMatchState {
  pcre2_match_data* md = nullptr;
  uint32_t md_pairs = 0;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* mctx = nullptr;
  ~ThreadMatchState() {
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

ThreadMatchState& MatchState(const pcre2_code* code) {
  thread_local ThreadMatchState st;
  uint32_t pairs = 0;
  pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &pairs);
  pairs += 1;
  if (st.md == nullptr || st.md_pairs < pairs) {
    if (st.md) pcre2_match_data_free(st.md);
    st.md = pcre2_match_data_create(pairs, nullptr);
    st.md_pairs = pairs;
  }
  if (st.mctx == nullptr) {
    st.mctx = pcre2_match_context_create(nullptr);
    st.jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (st.jit_stack) pcre2_jit_stack_assign(st.mctx, nullptr, st.jit_stack);
  }
  return st;
}

}  // namespace

StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return InvalidArgument("pre-tokenizer regex does not compile at offset %zu: %s (pattern: %s)",
                           static_cast<size_t>(err_off), reinterpret_cast<char*>(msg),
                           pattern.c_str());
  }
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  s->code_ = code;
  s->pattern_ = pattern;
  s->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  s->qwen2_ = pattern == kQwen2PreTokenizerPattern;
  return s;
}

RegexSplitter::~RegexSplitter() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

bool RegexSplitter::NextMatch(std::string_view text, size_t pos, size_t* start, size_t* end) const {
  if (qwen2_ && !force_pcre2_) {
    *start = pos;
    *end = Qwen2MatchEnd(text, pos);
    return true;
  }
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& st = MatchState(code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (pos < text.size()) {
    // The text was validated (or repaired) before splitting, hence NO_UTF_CHECK.
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.md, st.mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.md,
                       st.mctx);
    }
    if (rc < 0) return false;  // no match (or a resource error: the rest is one piece)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
    if (ov[1] > ov[0]) {
      *start = ov[0];
      *end = ov[1];
      return true;
    }
    // Empty match: retry one character further (skip the UTF-8 continuation bytes).
    pos = ov[0] + 1;
    while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  }
  return false;
}

}  // namespace mimo
