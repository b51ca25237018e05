// generation_config.json of a Hugging Face checkpoint: the extra EOS ids (MiMo lists both
// <|im_end|> and <|endoftext|> there while config.json has one) and the sampling defaults a
// server applies when a request leaves a field out (vLLM's --generation-config auto).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace mimo {

struct GenerationConfig {
  std::vector<int> eos_token_ids;  // eos_token_id as int or list
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<bool> do_sample;
};

StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& json_text);
// dir/generation_config.json; a checkpoint without one gives an empty config. vocab_size > 0
// (config.json's): an eos_token_id at or above it is refused, naming the file.
StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir, int vocab_size = 0);

}  // namespace mimo
