// The MPI job a process belongs to when mpirun started it: multi-worker training (issue 17) runs one
// replica per process and all-reduces gradients through MpiWorld, a Collective (core/collective.h) whose
// members are the job's ranks. Built on Open MPI or any MPI with MPI_Iallreduce (Debian's libopenmpi-dev);
// a build without MPI has the same functions, which say so.
//
// MPI is initialized only when a caller asks for the world, so every other command runs without it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/collective.h"

namespace tctl {

// Whether this build has MPI.
bool mpi_built();

// This process's rank and the job's size as the launcher's environment says, without initializing MPI:
// Open MPI's OMPI_COMM_WORLD_RANK/SIZE, or PMI_RANK/PMI_SIZE (MPICH's Hydra, Slurm). nullopt when no
// launcher started this process.
struct MpiLaunch {
  int rank = 0;
  int size = 1;
};
std::optional<MpiLaunch> mpi_launch();

class MpiWorld final : public Collective {
 public:
  // The job's world, MPI initialized on first use (with MPI_THREAD_MULTIPLE, or MPI_THREAD_SERIALIZED: the
  // all-reduces of one process never overlap, since a step issues them in one chain). `timeout` bounds
  // each all-reduce's wait for the other ranks. Throws RuntimeError without MPI or a launcher. Later calls
  // return the same world (their timeout is ignored).
  static std::shared_ptr<MpiWorld> get(Seconds timeout);

  int members() const override { return size_; }
  bool members_are_processes() const override { return true; }
  int rank() const { return rank_; }
  // out = the ranks' weight_r * in_r summed by MPI (each product rounded to float first, as the in-process
  // group does; with 2 ranks the sum is the group's bits, an addition being commutative). Each rank first
  // tells every other which key it has reached and waits for theirs, so a rank that does not arrive within
  // the timeout is named ("all-reduce of X: rank 1 of 2 did not arrive within 60 s"), and ranks that reach
  // different keys (diverged steps) are an error too. The sum then has the timeout again, from when every
  // rank has arrived; a rank that stops inside it (SIGSTOP, a debugger) fails the others too ("rank 1 of 2
  // arrived but did not finish the sum within 60 s"; with more ranks MPI cannot say which). Every failure
  // throws RuntimeError and leaves the process's MPI unusable: it should exit without mpi_finalize, which
  // makes mpirun end the job. `member` must be rank().
  void all_reduce(int member, std::uint64_t key, const float* in, std::int64_t n, float weight, float* out,
                  std::string_view what) override;
  // Nothing to release in-process: a failing rank exits, and mpirun ends the job.
  void abort(const std::string& reason) override;
  // Every rank's `value`, in rank order (start-up checks: the config hash). Waits for the others against
  // the timeout, naming the missing ("<what>: rank 1 of 2 did not arrive within 60 s"), as all_reduce.
  std::vector<std::uint64_t> all_gather(std::uint64_t value, std::string_view what);
  Seconds timeout() const override { return timeout_; }

 private:
  MpiWorld(int rank, int size, Seconds timeout);
  const int rank_;
  const int size_;
  const Seconds timeout_;
  std::int64_t calls_ = 0;  // all-reduces so far (TCTL_MPI_STALL counts them)
};

// Finalizes MPI if it was initialized (main calls it before a normal exit, on every rank). First every
// rank waits for the others' leaving notices against the world's timeout: MPI_Finalize waits for every
// rank without one. Throws RuntimeError naming a rank that did not come, without finalizing.
void mpi_finalize();

}  // namespace tctl
