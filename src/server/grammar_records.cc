// GrammarRecords (see grammar_records.h).
#include "server/grammar_records.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "core/log.h"
#include "core/sha256.h"
#include "server/api_server.h"

namespace mimo {
namespace {

namespace fs = std::filesystem;

// The newest first.
std::vector<fs::path> RecordFiles(const std::string& dir) {
  std::vector<std::pair<fs::file_time_type, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() != ".json" || p.filename().string().rfind("grammar-", 0) != 0) continue;
    std::error_code tec;
    const fs::file_time_type t = fs::last_write_time(p, tec);
    if (!tec) found.emplace_back(t, p);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

}  // namespace

GrammarRecords::GrammarRecords(std::string dir) : dir_(dir.empty() ? "" : dir + "/grammars") {}

void GrammarRecords::Record(const ConstraintRequest& r) const {
  if (dir_.empty()) return;
  nlohmann::ordered_json j;
  j["tools"] = r.tools;
  j["tool_choice"] = r.tool_choice;
  j["tool_choice_function"] = r.tool_choice_function;
  j["parallel_tool_calls"] = r.parallel_tool_calls;
  j["response_format"] = r.response_format;
  const std::string text = j.dump();
  if (text.size() > kMaxRecordBytes) return;
  const std::string name = "grammar-" + HexDigest(Sha256::Of(text)).substr(0, 32) + ".json";
  const fs::path file = fs::path(dir_) / name;
  std::error_code ec;
  if (fs::exists(file, ec)) {
    fs::last_write_time(file, fs::file_time_type::clock::now(), ec);  // used again: newest
    return;
  }
  fs::create_directories(dir_, ec);
  // Whole under a temporary name, then renamed: a reader never sees half a record.
  const fs::path tmp = fs::path(dir_) / (name + ".part-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out.good()) {
      MIMO_LOG_WARN("grammar records: cannot write %s", tmp.c_str());
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    MIMO_LOG_WARN("grammar records: cannot write %s: %s", file.c_str(), ec.message().c_str());
    fs::remove(tmp, ec);
    return;
  }
  const std::vector<fs::path> files = RecordFiles(dir_);
  for (size_t i = kMaxRecords; i < files.size(); ++i) fs::remove(files[i], ec);
}

int GrammarRecords::CompileAll(const ServingModel& m) const {
  if (dir_.empty() || m.grammars == nullptr) return 0;
  int compiled = 0;
  const std::vector<fs::path> files = RecordFiles(dir_);
  for (size_t i = 0; i < files.size() && i < kMaxRecords; ++i) {
    std::error_code ec;
    auto drop = [&](const std::string& why) {
      MIMO_LOG_WARN("grammar records: %s: %s; removed", files[i].c_str(), why.c_str());
      fs::remove(files[i], ec);
    };
    if (fs::file_size(files[i], ec) > kMaxRecordBytes || ec) {
      drop("too large");
      continue;
    }
    std::ifstream in(files[i], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("tool_choice") ||
        !j["tool_choice"].is_string() || !j.contains("parallel_tool_calls") ||
        !j["parallel_tool_calls"].is_boolean()) {
      drop("not a grammar record");
      continue;
    }
    ConstraintRequest r;
    r.tools = j.value("tools", nlohmann::ordered_json());
    r.tool_choice = j["tool_choice"].get<std::string>();
    if (j.contains("tool_choice_function") && j["tool_choice_function"].is_string()) {
      r.tool_choice_function = j["tool_choice_function"].get<std::string>();
    }
    r.parallel_tool_calls = j["parallel_tool_calls"].get<bool>();
    r.response_format = j.value("response_format", nlohmann::ordered_json());
    const StatusOr<std::shared_ptr<const Grammar>> g = CompileRequestGrammar(r, m);
    if (g.ok()) {
      ++compiled;
    } else if (g.status().code() != StatusCode::kInternal) {  // Internal: no grammar in it
      drop(g.status().message());
    }
  }
  return compiled;
}

}  // namespace mimo
