// generation_config.json -> GenerationConfig.
#include "io/generation_config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace mimo {

StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& text) {
  using json = nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("generation_config.json is not a JSON object");
  }
  GenerationConfig g;
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) {
      g.eos_token_ids.push_back(e.get<int>());
    } else if (e.is_array()) {
      for (const json& x : e) {
        if (!x.is_number_integer()) {
          return InvalidArgument("generation_config.json: eos_token_id entries must be integers");
        }
        g.eos_token_ids.push_back(x.get<int>());
      }
    } else {
      return InvalidArgument("generation_config.json: eos_token_id must be an integer or a list");
    }
  }
  auto num = [&](const char* key, std::optional<float>* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return Status::Ok();
    if (!j[key].is_number()) return InvalidArgument("generation_config.json: %s must be a number", key);
    *out = j[key].get<float>();
    return Status::Ok();
  };
  MIMO_RETURN_IF_ERROR(num("temperature", &g.temperature));
  MIMO_RETURN_IF_ERROR(num("top_p", &g.top_p));
  MIMO_RETURN_IF_ERROR(num("min_p", &g.min_p));
  MIMO_RETURN_IF_ERROR(num("repetition_penalty", &g.repetition_penalty));
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    if (!j["top_k"].is_number_integer()) {
      return InvalidArgument("generation_config.json: top_k must be an integer");
    }
    g.top_k = j["top_k"].get<int>();
  }
  if (j.contains("do_sample") && j["do_sample"].is_boolean()) g.do_sample = j["do_sample"].get<bool>();
  return g;
}

StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir) {
  std::ifstream f(dir + "/generation_config.json", std::ios::binary);
  if (!f) return GenerationConfig{};
  std::stringstream ss;
  ss << f.rdbuf();
  auto g = ParseGenerationConfig(ss.str());
  if (!g.ok()) return InvalidArgument("%s/%s", dir.c_str(), g.status().message().c_str());
  return g;
}

}  // namespace mimo
