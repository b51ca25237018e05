// Stop rules of one sample and its streamed text: EOS ids, stop token ids, stop strings matched
// on the detokenized text across token boundaries (never emitted: text that could still become
// the start of a stop string is held back until it cannot), max_tokens and the context length.
// Not thread-safe: one per sample, engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/detokenize_stream.h"

namespace mimo {

struct StopParams {
  int max_tokens = -1;  // -1: until the context is full
  int min_tokens = 0;   // stop ids are masked until this many tokens were generated
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // in the text (stop strings are matched on that text)
};

class StopChecker {
 public:
  // tokenizer may be null (no text; then `stop` must be empty). eos_ids: the model's EOS set.
  StopChecker(const Tokenizer* tokenizer, const StopParams& params,
              const std::vector<int32_t>& eos_ids);

  struct Step {
    std::string text;  // newly releasable text
    bool finished = false;
    bool by_length = false;   // finished by max_tokens / context (else by a stop rule)
    std::string stop_reason;  // matched stop string, or the stop token id
  };
  // Feeds the sample's next token. num_output: tokens generated including this one;
  // context_full: the sequence reached the context length.
  Step Append(int32_t id, int num_output, int max_tokens, bool context_full);

  // The output ends for another reason (e.g. a grammar completed): the text still held back.
  std::string Finish();

  // Ids that must not be sampled while fewer than min_tokens were generated.
  std::vector<int32_t> MinTokensMask(const std::vector<int32_t>& eos_ids) const;

 private:
  std::string Release(bool all);

  const StopParams& params_;
  std::vector<int32_t> eos_ids_;
  std::optional<DetokenizeStream> detok_;
  std::string text_;     // all text so far (up to a matched stop string)
  size_t emitted_ = 0;   // bytes of text_ already released
  size_t max_stop_ = 0;  // longest stop string
};

}  // namespace mimo
