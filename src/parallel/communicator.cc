// The single-rank Communicator and the MPI one (compiled in when CMake found MPI: MIMO_HAVE_MPI).
// Collectives are non-blocking MPI calls completed by a polling loop, which is the watchdog: past
// the timeout it prints which rank gave up on which collective and calls MPI_Abort, so a peer
// that hangs cannot hang the job (a peer that dies is reported by mpirun itself, which then
// stops every rank).
#include "parallel/communicator.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef MIMO_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (no deprecated C++ bindings to link)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace mimo {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void Broadcast(void*, size_t, int, const char*, bool) override {}
  void AllGatherV(const float* send, const std::vector<int>& counts, float* recv,
                  const char*) override {
    std::memcpy(recv, send, sizeof(float) * counts[0]);
  }
  void AllGatherBytes(const void* send, size_t bytes, void* recv, const char*) override {
    std::memcpy(recv, send, bytes);
  }
  void Barrier(const char*) override {}
  [[noreturn]] void Abort(int code, const std::string& why) override {
    std::fprintf(stderr, "mimo: error: %s\n", why.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  }
};

#ifdef MIMO_HAVE_MPI
double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const MpiOptions& o) : opts_(o) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void Broadcast(void* data, size_t bytes, int root, const char* what, bool idle) override {
    MPI_Request req;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req);
    Wait(&req, what, idle, rank_ == root ? 0 : bytes);
  }
  void AllGatherV(const float* send, const std::vector<int>& counts, float* recv,
                  const char* what) override {
    displs_.resize(size_);
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs_[r] = static_cast<int>(total);
      total += counts[r];
    }
    MPI_Request req;
    MPI_Iallgatherv(send, counts[rank_], MPI_FLOAT, recv, counts.data(), displs_.data(),
                    MPI_FLOAT, MPI_COMM_WORLD, &req);
    Wait(&req, what, false, 4 * (total - counts[rank_]));
  }
  void AllGatherBytes(const void* send, size_t bytes, void* recv, const char* what) override {
    MPI_Request req;
    MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                   MPI_BYTE, MPI_COMM_WORLD, &req);
    Wait(&req, what, false, static_cast<int64_t>(bytes) * (size_ - 1));
  }
  void Barrier(const char* what) override {
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    Wait(&req, what, false, 0);
  }
  [[noreturn]] void Abort(int code, const std::string& why) override {
    std::fprintf(stderr, "mimo: rank %d of %d: error: %s\n", rank_, size_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  // Polls until the request completes: spins briefly, then yields the core (ranks are often
  // oversubscribed), or sleeps when idle. The watchdog aborts the job past the timeout.
  void Wait(MPI_Request* req, const char* what, bool idle, int64_t bytes) {
    const double t0 = NowSeconds();
    int done = 0;
    for (int64_t spin = 0;; ++spin) {
      MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (done) break;
      if (spin < 64) continue;
      if (idle) {
        usleep(spin < 4096 ? 50 : 1000);
        continue;
      }
      sched_yield();
      if ((spin & 255) == 0 && opts_.collective_timeout_s > 0 &&
          NowSeconds() - t0 > opts_.collective_timeout_s) {
        Abort(3, std::string("collective '") + what + "' did not complete within " +
                     std::to_string(static_cast<int>(opts_.collective_timeout_s)) +
                     " s (--collective-timeout): a peer rank hangs or died; stopping the job");
      }
    }
    if (!idle) {
      stats_.calls++;
      stats_.seconds += NowSeconds() - t0;
      stats_.bytes += bytes;
    }
  }

  MpiOptions opts_;
  int rank_ = 0, size_ = 1;
  std::vector<int> displs_;
};

void FinalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
#endif

}  // namespace

std::unique_ptr<Communicator> MakeSingleRankCommunicator() {
  return std::make_unique<SingleRankCommunicator>();
}

bool MpiCompiledIn() {
#ifdef MIMO_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool LaunchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

StatusOr<Communicator*> InitMpiWorld(const MpiOptions& o) {
#ifdef MIMO_HAVE_MPI
  static MpiCommunicator* world = nullptr;
  if (world) return static_cast<Communicator*>(world);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return Internal("MPI_Init_thread failed");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return Internal("the MPI library gives thread level %d, mimo needs MPI_THREAD_SERIALIZED",
                    provided);
  }
  std::atexit(FinalizeMpi);
  world = new MpiCommunicator(o);  // lives until exit: MPI_Finalize runs at exit
  return static_cast<Communicator*>(world);
#else
  (void)o;
  return Unimplemented(
      "this mimo was built without MPI (install libopenmpi-dev and rebuild with -DMIMO_MPI=ON) "
      "so it cannot run tensor/expert parallel");
#endif
}

}  // namespace mimo
