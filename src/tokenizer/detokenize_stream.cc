// Streaming detokenizer: emit complete UTF-8, hold back an unfinished trailing character.
#include "tokenizer/detokenize_stream.h"

#include "core/utf8.h"

namespace mimo {

std::string DetokenizeStream::Add(int32_t id) {
  if (!tok_.IsValidId(id) || (skip_special_ && tok_.IsSpecial(id))) return "";
  pending_ += tok_.TokenBytes(id);
  std::string out;
  out.reserve(pending_.size());
  size_t i = 0;
  char32_t cp;
  size_t bad = 1;
  bool truncated = false;
  while (i < pending_.size()) {
    const size_t len = utf8::DecodeOne(pending_, i, &cp, &bad, &truncated);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (truncated) {
      break;  // a valid prefix cut off by the end: wait for the next token
    } else {
      utf8::Append(utf8::kReplacement, &out);
      i += bad;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string DetokenizeStream::Flush() {
  std::string out = utf8::Repair(pending_);
  pending_.clear();
  return out;
}

}  // namespace mimo
