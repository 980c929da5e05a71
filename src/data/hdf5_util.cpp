#include "hpctrain/data/hdf5_util.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::h5 {
namespace {

herr_t collect_innermost(unsigned /*n*/, const H5E_error2_t* err, void* client) {
  auto* out = static_cast<std::string*>(client);
  // Walking downward, the last entry is the innermost: the one that says what really failed.
  std::string text = err->desc ? err->desc : "";
  char minor[128] = {0};
  if (H5Eget_msg(err->min_num, nullptr, minor, sizeof minor) > 0 && minor[0] != '\0') {
    text = text.empty() ? minor : str(text, " (", minor, ")");
  }
  if (!text.empty()) *out = text;
  return 0;
}

template <typename ErrorType>
std::optional<std::pair<Handle, Handle>> open_attr(hid_t object, const char* name,
                                                   const std::string& where) {
  htri_t present = H5Aexists(object, name);
  if (present <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  const std::string what = str(where, " attribute ", name);
  Handle attr(HPCTRAIN_H5_AS(ErrorType, H5Aopen(object, name, H5P_DEFAULT), what), H5Aclose);
  Handle type(HPCTRAIN_H5_AS(ErrorType, H5Aget_type(attr.get()), what), H5Tclose);
  return std::make_pair(std::move(attr), std::move(type));
}

template <typename ErrorType>
std::int64_t attr_elements(hid_t attr, const std::string& where) {
  Handle space(HPCTRAIN_H5_AS(ErrorType, H5Aget_space(attr), where), H5Sclose);
  return HPCTRAIN_H5_AS(ErrorType, H5Sget_simple_extent_npoints(space.get()), where);
}

std::string tidy_driver_message(const std::string& text) {
  // HDF5's file drivers describe a failed system call in one long line: "file write failed:
  // time = ..., filename = '...', file descriptor = 7, errno = 28, error message = 'No space
  // left on device', buf = 0x..., total write size = 4096, bytes this sub-write = 4096, bytes
  // actually written = 18446744073709551615, offset = 0". Keep what failed and why.
  const std::size_t errno_at = text.find("errno = ");
  const std::size_t message_at = text.find("error message = '");
  if (errno_at == std::string::npos || message_at == std::string::npos) return text;
  const int err = std::atoi(text.c_str() + errno_at + 8);
  const std::size_t begin = message_at + 17;
  const std::size_t end = text.find('\'', begin);
  const std::string what = text.substr(0, std::min(text.find(':'), text.size()));
  const std::string why =
      text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  return str(what, ": ", why, " (errno ", err, ")",
             err == 28 || err == 122 ? ": free space (or quota) on that file system" : "");
}

}  // namespace

void silence_errors() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string take_error_detail() {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_innermost, &detail);
  H5Eclear2(H5E_DEFAULT);
  return tidy_driver_message(detail);
}

std::string call_error_message(const std::string& where, const char* call, const char* file,
                               int line) {
  std::string detail = take_error_detail();
  const char* base = std::strrchr(file, '/');
  return str(where, ": HDF5 call ", call, " failed (", base ? base + 1 : file, ":", line, ")",
             detail.empty() ? "" : ": ", detail);
}

std::string type_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  switch (cls) {
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      return str(is_signed ? "int" : "uint", size * 8);
    }
    case H5T_FLOAT: return str("float", size * 8);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "vlen";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    default: return "unknown";
  }
}

std::string shape_string(const std::vector<std::int64_t>& dims) {
  std::ostringstream out;
  out << "(";
  for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  out << (dims.size() == 1 ? ",)" : ")");
  return out.str();
}

bool exists(hid_t loc, const char* name) {
  htri_t present = H5Lexists(loc, name, H5P_DEFAULT);
  if (present < 0) H5Eclear2(H5E_DEFAULT);
  return present > 0;
}

std::vector<std::int64_t> dataset_dims(hid_t dataset, const std::string& where) {
  Handle space(HPCTRAIN_H5(H5Dget_space(dataset), where), H5Sclose);
  const int rank = HPCTRAIN_H5(H5Sget_simple_extent_ndims(space.get()), where);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  HPCTRAIN_H5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), where);
  return std::vector<std::int64_t>(dims.begin(), dims.end());
}

std::vector<std::int64_t> chunk_dims(hid_t dataset, const std::string& where) {
  Handle plist(HPCTRAIN_H5(H5Dget_create_plist(dataset), where), H5Pclose);
  if (H5Pget_layout(plist.get()) != H5D_CHUNKED) return {};
  hsize_t dims[H5S_MAX_RANK];
  const int rank = HPCTRAIN_H5(H5Pget_chunk(plist.get(), H5S_MAX_RANK, dims), where);
  return std::vector<std::int64_t>(dims, dims + rank);
}

std::optional<double> read_number_attr(hid_t object, const char* name, const std::string& where) {
  auto opened = open_attr<DataError>(object, name, where);
  if (!opened) return std::nullopt;
  auto& [attr, type] = *opened;
  const H5T_class_t cls = H5Tget_class(type.get());
  const std::int64_t n = attr_elements<DataError>(attr.get(), where);
  if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || n != 1) {
    throw DataError(str(where, ": attribute '", name, "' should be a single number, found ",
                        type_name(type.get()), " with ", n,
                        " element(s): rewrite it (docs/DATA.md lists the attributes)"));
  }
  double value = 0;
  HPCTRAIN_H5(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), str(where, " attribute ", name));
  return value;
}

template <typename ErrorType>
std::optional<std::string> read_string_attr(hid_t object, const char* name,
                                            const std::string& where) {
  auto opened = open_attr<ErrorType>(object, name, where);
  if (!opened) return std::nullopt;
  auto& [attr, type] = *opened;
  if (H5Tget_class(type.get()) != H5T_STRING || attr_elements<ErrorType>(attr.get(), where) != 1) {
    return std::nullopt;
  }
  const std::string what = str(where, " attribute ", name);
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle mem(HPCTRAIN_H5_AS(ErrorType, H5Tcopy(H5T_C_S1), what), H5Tclose);
    HPCTRAIN_H5_AS(ErrorType, H5Tset_size(mem.get(), H5T_VARIABLE), what);
    HPCTRAIN_H5_AS(ErrorType, H5Tset_cset(mem.get(), H5Tget_cset(type.get())), what);
    char* value = nullptr;
    HPCTRAIN_H5_AS(ErrorType, H5Aread(attr.get(), mem.get(), &value), what);
    std::string out = value ? value : "";
    if (value) H5free_memory(value);
    return out;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::string buffer(size + 1, '\0');
  Handle mem(HPCTRAIN_H5_AS(ErrorType, H5Tcopy(H5T_C_S1), what), H5Tclose);
  HPCTRAIN_H5_AS(ErrorType, H5Tset_size(mem.get(), size + 1), what);
  HPCTRAIN_H5_AS(ErrorType, H5Aread(attr.get(), mem.get(), buffer.data()), what);
  buffer.resize(std::strlen(buffer.c_str()));
  return buffer;
}

std::vector<std::pair<std::string, std::string>> describe_attrs(hid_t object,
                                                                const std::string& where) {
  std::vector<std::string> names;
  hsize_t index = 0;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  HPCTRAIN_H5(H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names), where);
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& name : names) {
    auto opened = open_attr<DataError>(object, name.c_str(), where);
    if (!opened) continue;
    auto& [attr, type] = *opened;
    const H5T_class_t cls = H5Tget_class(type.get());
    const std::int64_t n = attr_elements<DataError>(attr.get(), where);
    std::string value;
    if (cls == H5T_STRING && n == 1) {
      value = read_string_attr(object, name.c_str(), where).value_or("");
    } else if ((cls == H5T_INTEGER || cls == H5T_FLOAT) && n == 1) {
      double number = *read_number_attr(object, name.c_str(), where);
      value = cls == H5T_INTEGER ? str(static_cast<long long>(number)) : str(number);
    } else {
      value = str("<", type_name(type.get()), ", ", n, " elements>");
    }
    out.emplace_back(name, value);
  }
  return out;
}

namespace {

// A scalar attribute of type `file_type` holding *value (in `memory_type`).
template <typename ErrorType>
void write_scalar_attr(hid_t object, const char* name, hid_t file_type, hid_t memory_type,
                       const void* value, const std::string& where) {
  const std::string what = str(where, " attribute ", name);
  Handle space(HPCTRAIN_H5_AS(ErrorType, H5Screate(H5S_SCALAR), what), H5Sclose);
  Handle attr(HPCTRAIN_H5_AS(
                  ErrorType,
                  H5Acreate2(object, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), what),
              H5Aclose);
  HPCTRAIN_H5_AS(ErrorType, H5Awrite(attr.get(), memory_type, value), what);
}

}  // namespace

template <typename ErrorType>
void write_attr(hid_t object, const char* name, std::int64_t value, const std::string& where) {
  write_scalar_attr<ErrorType>(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, where);
}

template <typename ErrorType>
void write_attr(hid_t object, const char* name, double value, const std::string& where) {
  write_scalar_attr<ErrorType>(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, where);
}

template <typename ErrorType>
void write_attr(hid_t object, const char* name, const std::string& value,
                const std::string& where) {
  // Variable-length UTF-8, as h5py writes Python str attributes, so h5py reads them back as str.
  const std::string what = str(where, " attribute ", name);
  Handle type(HPCTRAIN_H5_AS(ErrorType, H5Tcopy(H5T_C_S1), what), H5Tclose);
  HPCTRAIN_H5_AS(ErrorType, H5Tset_size(type.get(), H5T_VARIABLE), what);
  HPCTRAIN_H5_AS(ErrorType, H5Tset_cset(type.get(), H5T_CSET_UTF8), what);
  const char* text = value.c_str();
  write_scalar_attr<ErrorType>(object, name, type.get(), type.get(), &text, where);
}

// The error types the data and checkpoint layers use.
#define HPCTRAIN_H5_INSTANTIATE(ErrorType)                                                   \
  template std::optional<std::string> read_string_attr<ErrorType>(hid_t, const char*,        \
                                                                  const std::string&);       \
  template void write_attr<ErrorType>(hid_t, const char*, std::int64_t, const std::string&); \
  template void write_attr<ErrorType>(hid_t, const char*, double, const std::string&);       \
  template void write_attr<ErrorType>(hid_t, const char*, const std::string&, const std::string&);
HPCTRAIN_H5_INSTANTIATE(DataError)
HPCTRAIN_H5_INSTANTIATE(CheckpointError)
#undef HPCTRAIN_H5_INSTANTIATE

}  // namespace hpctrain::data::h5
