// ProgressLine: the one-line progress report of long CLI jobs on stderr (weights read at start-up,
// benchmarks): "label: 12.3 / 40.0 GB, 2.10 GB/s, 13 s left", redrawn at most a few times a
// second with \r when stderr is a terminal, else printed every few seconds. Not thread-safe.
#pragma once

#include <chrono>
#include <string>

namespace mimo {

class ProgressLine {
 public:
  // unit: "GB" (done/total are bytes, shown in 1e9), or "" (counts, e.g. requests: drawn as a
  // bar with whole numbers).
  ProgressLine(std::string label, double total, std::string unit = "");
  // Reports `done` of total; prints if enough time passed since the last line (or force).
  void Update(double done, bool force = false);
  // Prints the final line (with a newline) and the elapsed time.
  void Finish();
  double elapsed_seconds() const;

 private:
  std::string Format(double done) const;

  std::string label_, unit_;
  double total_;
  double last_done_ = 0;
  bool tty_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point start_, last_print_;
};

}  // namespace mimo
