#include "hpctrain/data/hdf5_lock.hpp"

namespace hpctrain::data {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

}  // namespace hpctrain::data
