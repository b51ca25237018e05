// DetokenizeStream: incremental decoding for streamed generation. Tokens may end in the middle of
// a UTF-8 character (byte-level BPE splits emoji and CJK across tokens); the stream holds such
// bytes back until the character is complete, so every piece it returns is valid UTF-8, and the
// concatenation of all pieces plus Flush() equals Tokenizer::Decode of all ids.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/bpe.h"

namespace mimo {

// Not thread-safe: one per request. Borrows the tokenizer, which must outlive it.
class DetokenizeStream {
 public:
  explicit DetokenizeStream(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(tokenizer), skip_special_(skip_special) {}

  // Feeds one id; returns the text completed by it (possibly empty). Unknown ids add nothing.
  // Bytes that can never become a valid character are emitted as U+FFFD right away; only the
  // incomplete prefix of a character at the very end is held back.
  std::string Add(int32_t id);
  // Returns whatever is still held (an unfinished character becomes U+FFFD) and resets.
  std::string Flush();
  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // an incomplete UTF-8 sequence at the end of the output so far
};

}  // namespace mimo
