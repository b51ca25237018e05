// `mimo tokenize` and `mimo detokenize`: text <-> token ids with DIR/tokenizer.json.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "tokenizer/bpe.h"

namespace mimo::cli {
namespace {

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& dir) {
  auto t = Tokenizer::FromFile(dir + "/tokenizer.json");
  if (!t.ok()) {
    std::fprintf(stderr, "error: %s\n", t.status().message().c_str());
    return nullptr;
  }
  return std::move(t).value();
}

int Tokenize(int argc, char** argv) {
  Args args;
  std::string err;
  if (!args.Parse(argc, argv, {"model", "text", "file"}, {"no-special"}, &err)) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 2;
  }
  if (!args.Has("model") || args.Has("text") == args.Has("file")) {
    std::fprintf(stderr, "error: tokenize needs --model DIR and exactly one of --text / --file\n");
    return 2;
  }
  std::string text = args.Get("text");
  if (args.Has("file")) {
    std::ifstream f(args.Get("file"), std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "error: cannot open --file '%s'\n", args.Get("file").c_str());
      return 1;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  auto tok = LoadTokenizer(args.Get("model"));
  if (!tok) return 1;
  const auto ids = tok->Encode(text, /*parse_special=*/!args.Has("no-special"));
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int Detokenize(int argc, char** argv) {
  Args args;
  std::string err;
  if (!args.Parse(argc, argv, {"model", "ids"}, {"skip-special"}, &err)) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 2;
  }
  if (!args.Has("model") || !args.Has("ids")) {
    std::fprintf(stderr, "error: detokenize needs --model DIR and --ids 1,2,3 (or @FILE)\n");
    return 2;
  }
  std::vector<int> ids;
  if (!ParseIdList(args.Get("ids"), &ids, &err)) {
    std::fprintf(stderr, "error: --ids: %s\n", err.c_str());
    return 2;
  }
  auto tok = LoadTokenizer(args.Get("model"));
  if (!tok) return 1;
  std::vector<int32_t> ids32;
  for (int id : ids) {
    if (!tok->IsValidId(id)) {
      std::fprintf(stderr, "error: --ids: token id %d is not in the vocabulary (size %d)\n", id,
                   tok->vocab_size());
      return 2;
    }
    ids32.push_back(id);
  }
  const std::string text = tok->Decode(ids32, args.Has("skip-special"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("tokenize", "--model DIR (--text T | --file F) [--no-special]", Tokenize);
MIMO_CLI_COMMAND("detokenize", "--model DIR --ids 1,2,3|@FILE [--skip-special]", Detokenize);

}  // namespace mimo::cli
