// libFuzzer harness for the HTTP API's request parsers (src/server/request_json.h,
// openai_request.h); built and run by scripts/fuzz.sh. Input: byte 0 picks the endpoint, the rest
// is the request body. The body goes through ParseRequestBody (depth and size limits) and then
// the endpoint's pure parser. Checked: nothing crashes or throws; a parsed body is at most
// kMaxJsonDepth deep (so dumping and copying it is safe); an accepted request keeps every count
// and token id within the limits. The Anthropic and Responses parsers need an ApiServer (thinking
// signatures, the response store): their bodies go through ParseRequestBody and the shared field
// parsers they call (ParseGenerationFields, CheckTools).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"
#include "server/request_json.h"

namespace {

using mimo::OJson;

mimo::ServerDefaults Defaults() {
  mimo::ServerDefaults d;
  d.served_model_name = "mimo-v2-nano";
  d.max_model_len = 4096;
  d.vocab_size = 1000;
  return d;
}

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

int Depth(const OJson& j) {
  if (!j.is_structured()) return 0;
  int deepest = 0;
  for (const auto& v : j) deepest = std::max(deepest, Depth(v));
  return deepest + 1;
}

void CheckGen(const mimo::GenerationRequest& g, const mimo::ServerDefaults& d) {
  Check(g.n >= 1 && g.n <= mimo::kMaxN);
  Check(g.stop.stop.size() <= static_cast<size_t>(mimo::kMaxStopStrings));
  for (const auto& s : g.stop.stop) Check(!s.empty() && s.size() <= mimo::kMaxStopStringBytes);
  Check(g.stop.stop_token_ids.size() <= static_cast<size_t>(mimo::kMaxStopTokenIds));
  for (int32_t id : g.stop.stop_token_ids) Check(id >= 0 && id < d.vocab_size);
  Check(g.sampling.logit_bias.size() <= static_cast<size_t>(mimo::kMaxLogitBias));
  for (const auto& [id, bias] : g.sampling.logit_bias) Check(id >= 0 && id < d.vocab_size);
  Check(g.sampling.logprobs >= -1 && g.sampling.logprobs <= mimo::kMaxLogprobs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 6;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  OJson body;
  if (mimo::ParseRequestBody(text, &body)) return 0;
  Check(body.is_object());
  Check(Depth(body) <= mimo::kMaxJsonDepth);
  (void)body.dump();  // recursive: bounded by the depth limit
  const mimo::ServerDefaults d = Defaults();
  switch (which) {
    case 0: {  // /v1/chat/completions (and /tokenize with messages)
      mimo::ChatRequest r;
      if (!mimo::ParseChatRequest(body, d, &r)) {
        CheckGen(r.turn.gen, d);
        Check(r.turn.messages.is_array() && !r.turn.messages.empty());
        Check(r.turn.messages.size() <= static_cast<size_t>(mimo::kMaxMessages));
        Check(r.turn.tools.is_null() ||
              r.turn.tools.size() <= static_cast<size_t>(mimo::kMaxTools));
        (void)r.turn.messages.dump();  // tool-call arguments parsed: still bounded
      }
      break;
    }
    case 1: {  // /v1/completions
      mimo::CompletionRequest r;
      if (!mimo::ParseCompletionRequest(body, d, &r)) {
        CheckGen(r.gen, d);
        Check(!r.prompts.empty());
        Check(r.prompts.size() <= static_cast<size_t>(mimo::kMaxCompletionPrompts));
        Check(r.prompts.size() * static_cast<size_t>(r.gen.n) <=
              static_cast<size_t>(mimo::kMaxCompletionChoices));
        for (const auto& p : r.prompts)
          for (int32_t id : p.ids) Check(id >= 0 && id < d.vocab_size);
      }
      break;
    }
    case 2: {  // /detokenize
      std::vector<int32_t> ids;
      if (!mimo::ParseDetokenizeRequest(body, d, nullptr, &ids)) {
        for (int32_t id : ids) Check(id >= 0 && id < d.vocab_size);
      }
      break;
    }
    case 3: {  // the shared sampling fields (Anthropic and Responses map theirs onto them)
      mimo::GenerationRequest g;
      if (!mimo::ParseGenerationFields(body, d, /*chat=*/true, &g)) CheckGen(g, d);
      mimo::GenerationRequest g2;
      if (!mimo::ParseGenerationFields(body, d, /*chat=*/false, &g2)) CheckGen(g2, d);
      break;
    }
    case 4: {  // tools and tool_choice (every protocol's tools end here)
      mimo::ChatTurn t;
      if (!mimo::CheckTools(body, &t)) {
        Check(t.tools.is_null() || t.tools.size() <= static_cast<size_t>(mimo::kMaxTools));
      }
      break;
    }
    default: {  // nested JSON text (tool-call arguments) inside a string field
      for (const auto& [k, v] : body.items()) {
        if (!v.is_string()) continue;
        const OJson j = mimo::ParseNestedJson(v.get<std::string>());
        if (!j.is_discarded()) Check(Depth(j) <= mimo::kMaxJsonDepth);
      }
      break;
    }
  }
  return 0;
}
