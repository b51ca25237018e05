// Shared by the CLI subcommands that run the model: load it, make the thread pool, report errors
// as one line on stderr.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "model/mimo_v2.h"

namespace mimo::cli {

struct LoadedModel {
  std::unique_ptr<MimoV2Model> model;
  std::unique_ptr<ThreadPool> pool;
  ExecContext ctx;
};

inline bool LoadModelOrReport(const char* cmd, const std::string& dir, int threads,
                              LoadedModel* out) {
  auto m = MimoV2Model::Load(dir);
  if (!m.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, m.status().message().c_str());
    return false;
  }
  out->model = std::move(m).value();
  out->pool = std::make_unique<ThreadPool>(threads);
  out->ctx.pool = out->pool.get();
  return true;
}

}  // namespace mimo::cli
