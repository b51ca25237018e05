// The dist layer: a Communicator between the ranks of one tensor/expert-parallel job (MPI when
// built with it; a single-rank stand-in otherwise). Only the collectives the model needs, on
// float and byte buffers, and a watchdog: a collective that does not complete within the
// timeout stops the whole job with an error naming this rank and the collective (no hang).
// Thread-safety: one thread calls the collectives (the engine thread); rank()/size() anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace mimo {

// Where the time went (for `mimo bench model` and the docs): collectives issued by this rank.
struct CollectiveStats {
  int64_t calls = 0;
  double seconds = 0;  // wall time inside collectives, waiting for peers included
  int64_t bytes = 0;   // bytes this rank received
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool leader() const { return rank() == 0; }

  // root's `bytes` bytes to every rank. idle: the receiver may wait indefinitely (a follower
  // waiting for rank 0's next step, e.g. an idle server); it sleeps between polls and the
  // watchdog does not apply.
  virtual void Broadcast(void* data, size_t bytes, int root, const char* what,
                         bool idle = false) = 0;
  // Every rank's `counts[rank]` floats, concatenated in rank order into recv [sum(counts)].
  virtual void AllGatherV(const float* send, const std::vector<int>& counts, float* recv,
                          const char* what) = 0;
  // `bytes` from every rank into recv [size * bytes], rank order.
  virtual void AllGatherBytes(const void* send, size_t bytes, void* recv, const char* what) = 0;
  virtual void Barrier(const char* what) = 0;
  // Stops every rank of the job (exit code `code`) after printing `why` on stderr.
  [[noreturn]] virtual void Abort(int code, const std::string& why) = 0;

  const CollectiveStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CollectiveStats{}; }

 protected:
  CollectiveStats stats_;
};

// One rank: collectives are copies. What a plain `mimo ...` uses.
std::unique_ptr<Communicator> MakeSingleRankCommunicator();

struct MpiOptions {
  double collective_timeout_s = 300;  // --collective-timeout; <= 0: wait forever
};

// True when this binary was built with MPI (CMake MIMO_MPI and an MPI found).
bool MpiCompiledIn();
// True when the process was started by an MPI launcher (mpirun / mpiexec / srun set these).
bool LaunchedByMpi();
// Initialises MPI once per process (MPI_THREAD_SERIALIZED) and returns the world communicator.
// Errors: built without MPI, or MPI_Init failed. MPI_Finalize runs when the process exits.
StatusOr<Communicator*> InitMpiWorld(const MpiOptions& o);

}  // namespace mimo
