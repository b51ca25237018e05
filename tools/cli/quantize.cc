// `mimo quantize --model IN --out OUT --experts mxfp4 [--scale-rule mse|max] [--threads N]`:
// the routed experts of any MiMo-V2 checkpoint (FP8 block or BF16) rewritten in V2.6's MXFP4
// layout, everything else copied (io/expert_quantizer.h). Tensor by tensor, with progress.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "io/expert_quantizer.h"

namespace mimo::cli {
namespace {

int RunQuantize(int argc, char** argv) {
  Args a;
  std::string error;
  if (!a.Parse(argc, argv, {"model", "out", "experts", "scale-rule", "threads"}, {}, &error) ||
      !a.Has("model") || !a.Has("out")) {
    std::fprintf(stderr,
                 "error: %s\nusage: mimo quantize --model IN --out OUT [--experts mxfp4] "
                 "[--scale-rule mse|max] [--threads N]\n",
                 error.empty() ? "--model and --out are required" : error.c_str());
    return 2;
  }
  if (a.Get("experts", "mxfp4") != "mxfp4") {
    std::fprintf(stderr, "mimo quantize: error: --experts '%s' is not supported (only mxfp4)\n",
                 a.Get("experts").c_str());
    return 2;
  }
  const std::string rule = a.Get("scale-rule", "mse");
  if (rule != "mse" && rule != "max") {
    std::fprintf(stderr, "mimo quantize: error: --scale-rule '%s' (mse or max)\n", rule.c_str());
    return 2;
  }
  ThreadPool pool(static_cast<int>(a.GetInt("threads", 0)));
  QuantizeOptions o;
  o.in_dir = a.Get("model");
  o.out_dir = a.Get("out");
  o.rule = rule == "mse" ? Mxfp4ScaleRule::kMse : Mxfp4ScaleRule::kMax;
  o.pool = &pool;
  std::unique_ptr<ProgressLine> pl;
  o.progress = [&](uint64_t done, uint64_t total) {
    if (!pl) pl = std::make_unique<ProgressLine>("mimo quantize", static_cast<double>(total), "GB");
    pl->Update(static_cast<double>(done));
  };
  auto r = QuantizeExpertsToMxfp4(o);
  if (pl) pl->Finish();
  if (!r.ok()) {
    std::fprintf(stderr, "mimo quantize: error: %s\n", r.status().message().c_str());
    return 1;
  }
  const Mxfp4ErrorStats& e = r->error;
  const double w = e.sum_sq_weight > 0 ? e.sum_sq_weight : 1;
  std::printf("converted %d expert weights (%s) to MXFP4, copied %d tensors%s\n",
              r->tensors_converted, r->converted_from.empty() ? "none" : r->converted_from.c_str(),
              r->tensors_copied, r->tensors_kept_mxfp4 ? " (experts already MXFP4 kept)" : "");
  std::printf("safetensors bytes: %.3f GB -> %.3f GB (%.1f%%)\n", r->bytes_in / 1e9,
              r->bytes_out / 1e9, r->bytes_in ? 100.0 * r->bytes_out / r->bytes_in : 0.0);
  if (e.blocks) {
    std::printf(
        "expert weights' relative RMS error: %.5f with the %s rule (max rule %.5f); %lld of "
        "%lld blocks moved off the max rule's exponent\n",
        std::sqrt(e.sum_sq_error / w), rule.c_str(), std::sqrt(e.sum_sq_error_max_rule / w),
        static_cast<long long>(e.blocks_not_max), static_cast<long long>(e.blocks));
  }
  std::printf("wrote %s\n", o.out_dir.c_str());
  return 0;
}

}  // namespace
MIMO_CLI_COMMAND("quantize",
                 "--model IN --out OUT [--experts mxfp4] [--scale-rule mse|max] (routed experts "
                 "rewritten as V2.6's MXFP4)",
                 RunQuantize);
}  // namespace mimo::cli
