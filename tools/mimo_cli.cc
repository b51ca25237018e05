// mimo: the command-line entry point. Each subcommand lives in tools/cli/<name>.cc and registers
// itself with MIMO_CLI_COMMAND.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cli/command.h"

namespace mimo::cli {

std::vector<Command>& Registry() {
  static std::vector<Command> r;
  return r;
}

bool Args::Parse(int argc, char** argv, const std::vector<std::string>& keys,
                 const std::vector<std::string>& flags, std::string* error) {
  auto in = [](const std::vector<std::string>& v, const std::string& k) {
    for (auto& x : v) if (x == k) return true;
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      *error = "unexpected argument '" + a + "'";
      return false;
    }
    std::string k = a.substr(2), v;
    bool has_eq = false;
    if (auto eq = k.find('='); eq != std::string::npos) {
      v = k.substr(eq + 1);
      k = k.substr(0, eq);
      has_eq = true;
    }
    if (in(flags, k)) {
      values_[k] = has_eq ? v : "1";
      continue;
    }
    if (!in(keys, k)) {
      *error = "unknown option '--" + k + "'";
      return false;
    }
    if (!has_eq) {
      if (i + 1 >= argc) {
        *error = "option '--" + k + "' needs a value";
        return false;
      }
      v = argv[++i];
    }
    values_[k] = v;
  }
  return true;
}

std::string Args::Get(const std::string& k, const std::string& def) const {
  auto it = values_.find(k);
  return it == values_.end() ? def : it->second;
}
// A number option that is not a number ("--port abc") is a usage error, never 0.
long long Args::GetInt(const std::string& k, long long def) const {
  auto it = values_.find(k);
  if (it == values_.end()) return def;
  const char* s = it->second.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (*s == 0 || *end != 0 || errno == ERANGE) {
    std::fprintf(stderr, "mimo: error: --%s '%s' is not an integer\n", k.c_str(), s);
    std::exit(2);
  }
  return v;
}
double Args::GetDouble(const std::string& k, double def) const {
  auto it = values_.find(k);
  if (it == values_.end()) return def;
  const char* s = it->second.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (*s == 0 || *end != 0 || !std::isfinite(v)) {
    std::fprintf(stderr, "mimo: error: --%s '%s' is not a number\n", k.c_str(), s);
    std::exit(2);
  }
  return v;
}

bool ReadFileToString(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    std::string item = s.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
    pos = comma + 1;
  }
  return out;
}

bool ParseIdList(const std::string& spec, std::vector<int>* out, std::string* error) {
  std::string text = spec;
  if (!spec.empty() && spec[0] == '@' && !ReadFileToString(spec.substr(1), &text)) {
    *error = "cannot open ids file '" + spec.substr(1) + "'";
    return false;
  }
  out->clear();
  std::string cur;
  auto flush = [&]() -> bool {
    if (cur.empty()) return true;
    char* end = nullptr;
    long v = std::strtol(cur.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 0x7fffffff) {
      *error = "bad token id '" + cur + "'";
      return false;
    }
    out->push_back(static_cast<int>(v));
    cur.clear();
    return true;
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') {
      if (!flush()) return false;
    } else {
      cur += c;
    }
  }
  if (!flush()) return false;
  if (out->empty()) {
    *error = "empty id list";
    return false;
  }
  return true;
}

}  // namespace mimo::cli

int main(int argc, char** argv) {
  using mimo::cli::Registry;
  if (argc >= 2) {
    for (const auto& c : Registry()) {
      if (std::strcmp(argv[1], c.name) != 0) continue;
      // `mimo <command> --help`: the command's usage on stdout, exit 0 (commands with a longer
      // usage text answer --help themselves: serve, and bench with each mode's own).
      const bool own_help = std::strcmp(c.name, "serve") == 0 || std::strcmp(c.name, "bench") == 0;
      for (int i = 2; i < argc && !own_help; ++i) {
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
          std::printf("usage: mimo %s %s\n", c.name, c.usage);
          return 0;
        }
      }
      return c.run(argc - 1, argv + 1);
    }
  }
  std::fprintf(stderr, "usage: mimo <command> [options]\ncommands:\n");
  for (const auto& c : Registry()) std::fprintf(stderr, "  %-12s %s\n", c.name, c.usage);
  return argc >= 2 && std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
