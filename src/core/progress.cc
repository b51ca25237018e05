// ProgressLine (see progress.h).
#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/status.h"

namespace mimo {

ProgressLine::ProgressLine(std::string label, double total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

double ProgressLine::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressLine::Format(double done) const {
  const double t = elapsed_seconds();
  const double scale = unit_ == "GB" ? 1e9 : 1.0;
  const double rate = t > 0 ? done / scale / t : 0.0;
  std::string s;
  if (unit_ == "GB") {
    s = StrFormat("%s: %.2f / %.2f GB, %.2f GB/s", label_.c_str(), done / scale, total_ / scale,
                  rate);
  } else {  // counts: a bar, then whole numbers ("requests: [#####     ] 5 / 10, 1.20/s")
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * std::min(1.0, done / total_)) : 0;
    s = StrFormat("%s: [%s%s] %.0f / %.0f, %.2f/s", label_.c_str(),
                  std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(), done,
                  total_, rate);
  }
  if (done < total_ && rate > 0) {
    s += StrFormat(", %.0f s left", (total_ - done) / scale / rate);
  } else if (done >= total_) {
    s += StrFormat(", done in %.1f s", t);
  }
  return s;
}

void ProgressLine::Update(double done, bool force) {
  last_done_ = done;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (!force && since < (tty_ ? 0.25 : 5.0)) return;
  last_print_ = now;
  std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", Format(done).c_str());
  std::fflush(stderr);
  printed_ = true;
}

void ProgressLine::Finish() {
  std::fprintf(stderr, tty_ ? "\r%s\033[K\n" : "%s\n", Format(total_).c_str());
  std::fflush(stderr);
}

}  // namespace mimo
