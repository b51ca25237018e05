// CLI subcommand registry and a small --flag parser shared by the subcommands in tools/cli/.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mimo::cli {

struct Command {
  const char* name;
  const char* usage;  // one line: "--model DIR --ids 1,2,3 --out FILE"
  int (*run)(int argc, char** argv);  // argv[0] is the subcommand name
};

std::vector<Command>& Registry();
inline bool Register(const Command& c) {
  Registry().push_back(c);
  return true;
}
#define MIMO_CLI_COMMAND(NAME, USAGE, FN) \
  static const bool kRegistered_##FN = ::mimo::cli::Register({NAME, USAGE, FN})

// Parses "--key value", "--key=value" and bare "--flag" (a flag is a key in `flags`).
// Unknown keys or a missing value are errors (returned false, message in *error).
class Args {
 public:
  bool Parse(int argc, char** argv, const std::vector<std::string>& keys,
             const std::vector<std::string>& flags, std::string* error);
  bool Has(const std::string& k) const { return values_.count(k) > 0; }
  std::string Get(const std::string& k, const std::string& def = "") const;
  long long GetInt(const std::string& k, long long def) const;
  double GetDouble(const std::string& k, double def) const;
  void Erase(const std::string& k) { values_.erase(k); }

 private:
  std::map<std::string, std::string> values_;
};

// Whole file as bytes; false when it cannot be opened.
bool ReadFileToString(const std::string& path, std::string* out);

// "1,2,3" or "@FILE" (ids separated by commas/whitespace). False on a malformed list.
bool ParseIdList(const std::string& spec, std::vector<int>* out, std::string* error);

// "a, b,c" -> {"a", "b", "c"}: items trimmed of spaces, empty ones dropped.
std::vector<std::string> SplitList(const std::string& s);

}  // namespace mimo::cli
