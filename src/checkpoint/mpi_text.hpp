#pragma once
// Private MPI helpers of the checkpoint layer: text messages between ranks, and agreeing on an
// error so that every rank throws the same CheckpointError (DESIGN.md invariant 2).
// Point-to-point waits poll with short sleeps instead of blocking in MPI: OpenMPI's blocking
// receive spins on a core, and the background writer must leave the cores to training.

#include <mpi.h>

#include <string>

namespace hpctrain::checkpoint::mpi {

/// Sends `text` to `dest` on `comm` (two messages: length, bytes) and waits politely for the
/// sends to complete. Local to the pair.
void send_text(MPI_Comm comm, int dest, int tag, const std::string& text);
/// Receives what send_text sent from `source` with `tag`, polling politely. Local to the pair.
std::string recv_text(MPI_Comm comm, int source, int tag);
/// `text` from `root` on every rank. Collective over `comm`.
std::string bcast_text(MPI_Comm comm, int root, const std::string& text);
/// Every rank passes its problem (empty: none). If any rank has one, every rank throws
/// CheckpointError with the message of the lowest such rank (prefixed with its world rank when
/// that is not rank 0). Collective over `comm`.
void agree(MPI_Comm comm, const std::string& problem);

}  // namespace hpctrain::checkpoint::mpi
