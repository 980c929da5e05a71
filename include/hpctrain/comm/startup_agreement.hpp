#pragma once
// One error, one message: the checks before a command's first collective (config, data files,
// model, checkpoint, run directory) run on every rank, and a bad input usually fails every rank
// alike. They end in an agreement: if any rank failed, every rank throws the lowest failing rank's
// error as an Agreed one (runtime/agreed_error.hpp), so that it is printed once (by world rank 0,
// naming the rank when it was another one) and every rank ends with its exit code by itself, not
// through MPI_Abort (whose launcher reports, and the stop signal it sends the other ranks, would
// follow the message). A rank that failed goes straight to its agreement: the others meet it at
// theirs (the same collective), before any other collective. Used by `train` and `eval`.

#include <utility>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/runtime/agreed_error.hpp"

namespace hpctrain::comm {

class StartupAgreement {
 public:
  explicit StartupAgreement(ControlPlane& world) : world_(world) {}

  /// Collective over the world: throws the agreed error when any rank holds one (`mine`: this
  /// rank's, or null).
  void agree(const Error* mine = nullptr);

  /// Runs `local` (checks with no collective in them), then agrees: with the error it threw, if
  /// any. An Agreed error passes through (every rank raised it already). Collective.
  template <class F>
  void run(F&& local) {
    try {
      std::forward<F>(local)();
    } catch (const Agreed&) {
      throw;
    } catch (const Error& e) {
      agree(&e);  // throws the agreed error
    }
    agree();
  }

 private:
  ControlPlane& world_;
};

}  // namespace hpctrain::comm
