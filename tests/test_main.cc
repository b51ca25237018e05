// The main() of every gtest binary: gtest's own, plus a watchdog that fails a test which runs
// longer than $MIMO_TEST_TIMEOUT seconds (default 240; the slowest test takes about 35 s here).
// A hang then reports the test's name within minutes, instead of running into ctest's per-binary
// limit or CI's. The watchdog ends the process (a hung test cannot be unwound from another
// thread); the tests before it have already reported.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace {

class Watchdog final : public testing::EmptyTestEventListener {
 public:
  explicit Watchdog(int seconds) : limit_(seconds), thread_([this] { Run(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void OnTestStart(const testing::TestInfo& t) override {
    std::lock_guard<std::mutex> lk(mu_);
    name_ = std::string(t.test_suite_name()) + "." + t.name();
    deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(limit_);
    running_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const testing::TestInfo&) override {
    std::lock_guard<std::mutex> lk(mu_);
    running_ = false;
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!done_) {
      if (!running_) {
        cv_.wait(lk);
        continue;
      }
      const auto deadline = deadline_;
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && running_ && !done_ &&
          deadline_ == deadline) {
        std::fprintf(stderr,
                     "[  TIMEOUT ] %s ran longer than %d s (MIMO_TEST_TIMEOUT): failing the "
                     "binary\n",
                     name_.c_str(), limit_);
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  const int limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  bool running_ = false;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const char* env = std::getenv("MIMO_TEST_TIMEOUT");
  const int seconds = env && std::atoi(env) > 0 ? std::atoi(env) : 240;
  // The listener list owns what it is given and deletes it after the run.
  testing::UnitTest::GetInstance()->listeners().Append(new Watchdog(seconds));
  return RUN_ALL_TESTS();
}
