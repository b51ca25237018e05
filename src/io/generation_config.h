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

// source names the text in error messages.
StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& json_text,
                                                 const char* source = "generation_config.json");
// --override-generation-config (vLLM's flag): a JSON object of sampling defaults, any of
// temperature, top_p, top_k, min_p, repetition_penalty; any other key is refused, naming it.
StatusOr<GenerationConfig> ParseGenerationConfigOverride(const std::string& json_text);
// The sampling fields `over` sets replace those of *gen; the rest (eos ids included) stay.
void OverrideGenerationConfig(const GenerationConfig& over, GenerationConfig* gen);
// dir/generation_config.json; a checkpoint without one gives an empty config. vocab_size > 0
// (config.json's): an eos_token_id at or above it is refused, naming the file.
StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir, int vocab_size = 0);

}  // namespace mimo
