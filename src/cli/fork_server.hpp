#pragma once
// Test machinery: many one-process commands from one loaded binary. A test that starts hundreds
// of one-process commands (the fuzz cases, the documented examples, the tables of bad files)
// spends most of its CPU loading LibTorch (its shared libraries, their relocations and its
// operator registration: about 1 CPU-second a process on Debian 12, docs/BENCHMARKS.md "The test
// suite"), not in hpctrain. With HPCTRAIN_TEST_FORK_SERVER=SOCKET in its environment, `hpctrain`
// loads once, listens on that Unix socket, and for each request forks a child that runs the
// request's command line from main: a fresh process (its own pid, exit code, signals, working
// directory, environment, standard streams, files and MPI singleton) that skipped the loading,
// and ends without static destructors (it flushes its streams and HDF5's files, then _exit: in a
// fork, LibTorch's destructors copy every page its loading wrote). Under mpirun the client runs
// on each rank and hands its environment (the launcher's variables) to the child, whose MPI_Init
// then joins the job as that rank (the server never initialises MPI). Every other test runs
// hpctrain as a process of its own. A child's resident memory counts the pages it shares with the
// server: tests that measure memory run the binary. tests/support/fork_client.cpp is the client
// of the scripts (tests/support/forked_hpctrain.py, of Python drivers). Nothing else reads the
// variable; no user command starts this way.

namespace hpctrain::cli {

/// The command-line entry point a forked child runs (main's own).
using MainFunction = int (*)(int argc, char** argv);

/// Listens on the Unix socket `socket_path` (replacing a stale file there) until the process is
/// killed or its parent ends. A connection carries one request: a JSON line {"argv": [program,
/// args...], "cwd": DIR, "env": ["NAME=VALUE", ...]} sent with three file descriptors (SCM_RIGHTS)
/// that become the child's stdin, stdout and stderr. The server forks a handler per connection,
/// which forks the child (in a process group of its own) and answers {"pid": N}, then, when the
/// child ends, {"exit": CODE} or {"signal": NUMBER}; when the client goes away first, the child's
/// group is killed. {"error": TEXT} answers a request that could not start. What the libraries
/// read from the environment while they load (OMP_*, OPENBLAS_*) is the server's. Returns main's
/// exit code when the socket cannot be opened (2). Local; one process.
int serve_forked_commands(const char* socket_path, MainFunction run);

}  // namespace hpctrain::cli
