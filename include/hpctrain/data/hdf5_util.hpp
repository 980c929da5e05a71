#pragma once
// HDF5 helpers of the data layer, shared with the checkpoint layer: RAII handles, the HPCTRAIN_H5
// check macro that turns a failed call into an error naming the file and dataset (DataError, or
// the error type given to HPCTRAIN_H5_AS: the checkpoint layer throws CheckpointError), and
// attribute reading and writing in the form h5py uses (scalar numbers, variable-length UTF-8).
// Callers hold hdf5_mutex() (hdf5_lock.hpp): this HDF5 build is not thread-safe.

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/runtime/error.hpp"

namespace hpctrain::data::h5 {

/// Owns an HDF5 identifier and closes it with the matching H5?close. Move-only. Local.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, -1);
      closer_ = other.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset() { close(); }
  /// Closes now and returns the result: closing a file flushes its metadata, which can fail.
  herr_t close() {
    const herr_t result = id_ >= 0 && closer_ ? closer_(id_) : 0;
    id_ = -1;
    return result;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

/// Turns off HDF5's own printing of its error stack (we report errors ourselves). Local.
void silence_errors();

/// The innermost HDF5 error on the stack ("unable to open file: ... errno = 2, ..."), then clears
/// the stack. Empty when there is none. Local.
std::string take_error_detail();

/// "<where>: HDF5 call <call> failed (<file>:<line>): <HDF5 detail>" (takes the error detail).
std::string call_error_message(const std::string& where, const char* call, const char* file,
                               int line);

template <typename ErrorType, typename T, typename Where>
T checked(T result, const char* call, const char* file, int line, Where&& where) {
  if (result < 0) throw ErrorType(call_error_message(where(), call, file, line));
  return result;
}

/// "int64", "uint8", "float32", "string", "compound" ...: a dtype name as numpy spells it. Local.
std::string type_name(hid_t type);
/// "(60000, 1, 28, 28)". Local.
std::string shape_string(const std::vector<std::int64_t>& dims);

/// Whether `name` (a path relative to `loc`, no nesting) exists. Local.
bool exists(hid_t loc, const char* name);
/// The extent of a dataset's dataspace. Local.
std::vector<std::int64_t> dataset_dims(hid_t dataset, const std::string& where);
/// The chunk shape, or empty for a contiguous or compact dataset. Local.
std::vector<std::int64_t> chunk_dims(hid_t dataset, const std::string& where);

/// Attribute `name` of `object` as a number (any integer or float type, scalar or one element),
/// nullopt when absent. Throws DataError naming `where` when it exists but is not a number.
std::optional<double> read_number_attr(hid_t object, const char* name, const std::string& where);
/// Attribute `name` as a string (fixed or variable length), nullopt when absent or not a single
/// string. HDF5 failures throw ErrorType (instantiated for DataError and CheckpointError).
template <typename ErrorType = DataError>
std::optional<std::string> read_string_attr(hid_t object, const char* name,
                                            const std::string& where);
/// Every attribute of `object` as "name" -> printable value (for inspect). Local.
std::vector<std::pair<std::string, std::string>> describe_attrs(hid_t object,
                                                                const std::string& where);

/// Writes scalar attributes the way h5py does (int64, float64, variable-length UTF-8). HDF5
/// failures throw ErrorType (instantiated for DataError and CheckpointError).
template <typename ErrorType = DataError>
void write_attr(hid_t object, const char* name, std::int64_t value, const std::string& where);
template <typename ErrorType = DataError>
void write_attr(hid_t object, const char* name, double value, const std::string& where);
template <typename ErrorType = DataError>
void write_attr(hid_t object, const char* name, const std::string& value, const std::string& where);

}  // namespace hpctrain::data::h5

/// Checks an HDF5 call (negative = failure) and returns its result; `where` (evaluated only on
/// failure) names the file and dataset: HPCTRAIN_H5(H5Dopen2(...), str(path, ": /inputs")).
/// A failure throws DataError; HPCTRAIN_H5_AS(ErrorType, call, where) throws ErrorType.
#define HPCTRAIN_H5_AS(ErrorType, call, where)                                \
  ::hpctrain::data::h5::checked<ErrorType>((call), #call, __FILE__, __LINE__, \
                                           [&] { return (where); })
#define HPCTRAIN_H5(call, where) HPCTRAIN_H5_AS(::hpctrain::DataError, call, where)
