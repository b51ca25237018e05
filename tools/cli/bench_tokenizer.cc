// `mimo bench-tokenizer`: single-thread encode/decode throughput (MB/s of UTF-8 input) of
// DIR/tokenizer.json on text files. "cold" = first pass on a freshly loaded tokenizer (empty BPE
// cache), "warm" = median of the following passes. Times are the thread's CPU time, so that
// other processes on a shared machine do not distort the figures.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tokenizer/bpe.h"

namespace mimo::cli {
namespace {

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int BenchTokenizer(int argc, char** argv) {
  Args args;
  std::string err;
  if (!args.Parse(argc, argv, {"model", "file", "repeat"}, {}, &err)) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 2;
  }
  if (!args.Has("model") || !args.Has("file")) {
    std::fprintf(stderr, "error: bench-tokenizer needs --model DIR --file F[,F2...]\n");
    return 2;
  }
  const int repeat = static_cast<int>(std::max(1LL, args.GetInt("repeat", 5)));
  std::vector<std::string> files;
  std::stringstream list(args.Get("file"));
  for (std::string f; std::getline(list, f, ',');) {
    if (!f.empty()) files.push_back(f);
  }
  std::printf("%-40s %9s %9s %8s %11s %11s %11s\n", "file", "MB", "tokens", "B/token", "cold MB/s",
              "warm MB/s", "decode MB/s");
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "error: cannot open '%s'\n", path.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    auto t = Tokenizer::FromFile(args.Get("model") + "/tokenizer.json");  // fresh cache per file
    if (!t.ok()) {
      std::fprintf(stderr, "error: %s\n", t.status().message().c_str());
      return 1;
    }
    const Tokenizer& tok = **t;
    if (!tok.regex_jit()) std::fprintf(stderr, "note: PCRE2 JIT unavailable, regex interpreted\n");
    const double mb = text.size() / 1e6;
    double t0 = CpuNow();
    std::vector<int32_t> ids = tok.Encode(text);
    const double cold = CpuNow() - t0;
    std::vector<double> warm, dec;
    for (int r = 0; r < repeat; ++r) {
      t0 = CpuNow();
      ids = tok.Encode(text);
      warm.push_back(CpuNow() - t0);
      t0 = CpuNow();
      const std::string back = tok.Decode(ids);
      dec.push_back(CpuNow() - t0);
      if (back.size() < text.size() / 2) std::fprintf(stderr, "warning: decode looks wrong\n");
    }
    std::sort(warm.begin(), warm.end());
    std::sort(dec.begin(), dec.end());
    std::string name = path.size() > 40 ? "..." + path.substr(path.size() - 37) : path;
    std::printf("%-40s %9.2f %9zu %8.2f %11.1f %11.1f %11.1f\n", name.c_str(), mb, ids.size(),
                ids.empty() ? 0.0 : double(text.size()) / ids.size(), mb / cold,
                mb / warm[warm.size() / 2], mb / dec[dec.size() / 2]);
  }
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("bench-tokenizer", "--model DIR --file F[,F2...] [--repeat N]", BenchTokenizer);

}  // namespace mimo::cli
