// `mimo backends --model DIR [--attention-backend NAME] [--strict-attention-backend]
//  [--block-size N] [--kv-cache-dtype f32|bf16|fp8]`: the registered attention backends with
// their declared capabilities, and the backend every layer resolves to and why, as JSON.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "attention/registry.h"
#include "cli/command.h"
#include "io/hf_config.h"
#include "kv/paged_kv_attention.h"

namespace mimo::cli {
namespace {

nlohmann::ordered_json CapabilitiesJson(const AttentionCapabilities& c) {
  nlohmann::ordered_json dtypes = nlohmann::ordered_json::array();
  for (DType t : c.kv_dtypes) dtypes.push_back(KvDTypeName(t));
  nlohmann::ordered_json j;
  j["head_dims"] = HeadDimSupportName(c.head_dims);
  j["sinks"] = c.sinks;
  j["sliding_window"] = c.sliding_window;
  j["kv_dtypes"] = dtypes;
  j["block_sizes"] =
      c.block_sizes.empty() ? nlohmann::ordered_json("any") : nlohmann::ordered_json(c.block_sizes);
  j["multi_token_queries"] = c.multi_token_queries;
  j["paged"] = c.paged;
  j["contiguous"] = c.contiguous;
  return j;
}

int RunBackends(int argc, char** argv) {
  const char* usage =
      "usage: mimo backends --model DIR [--attention-backend NAME] [--strict-attention-backend] "
      "[--block-size N] [--kv-cache-dtype f32|bf16|fp8]";
  Args args;
  std::string error;
  if (!args.Parse(argc, argv, {"model", "attention-backend", "block-size", "kv-cache-dtype"},
                  {"strict-attention-backend"}, &error) ||
      !args.Has("model")) {
    std::fprintf(stderr, "mimo backends: error: %s\n%s\n",
                 error.empty() ? "--model is required" : error.c_str(), usage);
    return 2;
  }
  auto config = LoadModelConfig(args.Get("model") + "/config.json");
  if (!config.ok()) {
    std::fprintf(stderr, "mimo backends: error: %s\n", config.status().message().c_str());
    return 1;
  }
  PagedKvOptions opts;
  opts.attention_backend = args.Get("attention-backend");
  opts.strict_backend = args.Has("strict-attention-backend");
  opts.block_size = static_cast<int>(args.GetInt("block-size", 16));
  if (args.Has("kv-cache-dtype")) {
    auto t = ParseKvCacheDType(args.Get("kv-cache-dtype"));
    if (!t.ok()) {
      std::fprintf(stderr, "mimo backends: error: %s\n", t.status().message().c_str());
      return 2;
    }
    opts.kv_dtype = *t;
  }
  if (opts.block_size <= 0) {
    std::fprintf(stderr, "mimo backends: error: --block-size must be positive\n");
    return 2;
  }
  auto layers = ResolveLayerBackends(*config, opts);
  if (!layers.ok()) {
    std::fprintf(stderr, "mimo backends: error: %s\n", layers.status().message().c_str());
    return 1;
  }
  nlohmann::ordered_json out;
  out["backends"] = nlohmann::ordered_json::array();
  for (const AttentionBackend* b : BuiltinAttentionBackends().backends()) {
    out["backends"].push_back(
        {{"name", b->name()}, {"capabilities", CapabilitiesJson(b->capabilities())}});
  }
  out["layers"] = nlohmann::ordered_json::array();
  std::set<std::string> warned;
  for (const LayerBackendChoice& c : *layers) {
    const char* kind = c.kind == AttentionKind::kSlidingWindow ? "sliding_window" : "full";
    out["layers"].push_back(
        {{"layer", c.layer}, {"kind", kind}, {"backend", c.backend->name()}, {"reason", c.reason}});
    if (!c.warning.empty() && warned.insert(c.warning).second) {
      std::fprintf(stderr, "warning: %s\n", c.warning.c_str());  // once per distinct fallback
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("backends",
                 "--model DIR [--attention-backend NAME] [--strict-attention-backend] "
                 "[--block-size N] [--kv-cache-dtype f32|bf16|fp8]",
                 RunBackends);

}  // namespace mimo::cli
