// generation_config.json -> GenerationConfig.
#include "io/generation_config.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace mimo {

StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& text, const char* source) {
  using json = nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("%s is not a JSON object", source);
  }
  GenerationConfig g;
  // A token id: an integer in [0, 2^31) (get<int>() would wrap 2^32 to 0 and take -5 as is; the
  // vocabulary bound comes later, from config.json: LoadGenerationConfig).
  auto token_id = [](const json& x, int* out) {
    if (!x.is_number_integer()) return false;
    if (x.is_number_unsigned()) {
      if (x.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) return false;
    } else if (x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) {
      return false;
    }
    *out = static_cast<int>(x.get<int64_t>());
    return true;
  };
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    if (!e.is_number_integer() && !e.is_array()) {
      return InvalidArgument("%s: eos_token_id must be an integer or a list", source);
    }
    for (const json& x : e.is_array() ? e : json::array({e})) {
      int id = 0;
      if (!token_id(x, &id)) {
        return InvalidArgument(
            "%s: eos_token_id %s is not a token id (an integer in [0, 2^31))", source,
            x.dump().substr(0, 40).c_str());
      }
      g.eos_token_ids.push_back(id);
    }
  }
  auto num = [&](const char* key, std::optional<float>* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return Status::Ok();
    if (!j[key].is_number()) return InvalidArgument("%s: %s must be a number", source, key);
    *out = j[key].get<float>();
    return Status::Ok();
  };
  MIMO_RETURN_IF_ERROR(num("temperature", &g.temperature));
  MIMO_RETURN_IF_ERROR(num("top_p", &g.top_p));
  MIMO_RETURN_IF_ERROR(num("min_p", &g.min_p));
  MIMO_RETURN_IF_ERROR(num("repetition_penalty", &g.repetition_penalty));
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const json& k = j["top_k"];
    const bool fits = k.is_number_unsigned()
                          ? k.get<uint64_t>() <= INT32_MAX
                          : k.is_number_integer() && k.get<int64_t>() >= INT32_MIN &&
                                k.get<int64_t>() <= INT32_MAX;
    if (!fits) {
      return InvalidArgument("%s: top_k must be a 32-bit integer, got %s", source,
                             k.dump().substr(0, 40).c_str());
    }
    g.top_k = static_cast<int>(k.get<int64_t>());
  }
  if (j.contains("do_sample") && j["do_sample"].is_boolean()) g.do_sample = j["do_sample"].get<bool>();
  return g;
}

StatusOr<GenerationConfig> ParseGenerationConfigOverride(const std::string& text) {
  constexpr const char* kFlag = "--override-generation-config";
  constexpr const char* kKeys[] = {"temperature", "top_p", "top_k", "min_p", "repetition_penalty"};
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("%s is not a JSON object (e.g. '{\"temperature\": 0}')", kFlag);
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return InvalidArgument(
          "%s: unknown key '%s' (temperature, top_p, top_k, min_p, repetition_penalty)", kFlag,
          key.substr(0, 40).c_str());
    }
    if (value.is_null()) return InvalidArgument("%s: %s is null", kFlag, key.c_str());
  }
  return ParseGenerationConfig(text, kFlag);
}

void OverrideGenerationConfig(const GenerationConfig& over, GenerationConfig* gen) {
  if (over.temperature) gen->temperature = over.temperature;
  if (over.top_p) gen->top_p = over.top_p;
  if (over.top_k) gen->top_k = over.top_k;
  if (over.min_p) gen->min_p = over.min_p;
  if (over.repetition_penalty) gen->repetition_penalty = over.repetition_penalty;
}

StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir, int vocab_size) {
  std::ifstream f(dir + "/generation_config.json", std::ios::binary);
  if (!f) return GenerationConfig{};
  std::stringstream ss;
  ss << f.rdbuf();
  auto g = ParseGenerationConfig(ss.str());
  if (!g.ok()) return InvalidArgument("%s/%s", dir.c_str(), g.status().message().c_str());
  for (const int id : g->eos_token_ids) {
    if (vocab_size > 0 && id >= vocab_size) {
      return InvalidArgument(
          "%s/generation_config.json: eos_token_id %d is not a token id: it must be in "
          "[0, vocab_size) and config.json's vocab_size is %d",
          dir.c_str(), id, vocab_size);
    }
  }
  return g;
}

}  // namespace mimo
