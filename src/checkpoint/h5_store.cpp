#include "h5_store.hpp"

#include <hdf5.h>

#include <utility>

#include "file_io.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/data/hdf5_util.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::checkpoint::h5 {
namespace {

// Datasets of at least 64 KiB start on a 4 KiB boundary: page-aligned writes and reads.
constexpr hsize_t kAlignThreshold = 64 * 1024;
constexpr hsize_t kAlignment = 4096;

using data::h5::Handle;

#define CKPT_H5(call, where) HPCTRAIN_H5_AS(CheckpointError, call, where)

// IEEE 754 half precision, built the way h5py builds it, so h5py reads it as numpy float16.
hid_t make_half_type() {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return t;
}

// The half type lives for the whole process (created under the HDF5 lock on first use).
hid_t half_type() {
  static hid_t type = make_half_type();
  return type;
}

struct TypeInfo {
  torch::ScalarType dtype;
  const char* name;
};
constexpr TypeInfo kTypes[] = {
    {torch::kFloat, "float32"},     {torch::kDouble, "float64"}, {torch::kHalf, "float16"},
    {torch::kBFloat16, "bfloat16"}, {torch::kInt8, "int8"},      {torch::kUInt8, "uint8"},
    {torch::kInt16, "int16"},       {torch::kInt32, "int32"},    {torch::kInt64, "int64"},
    {torch::kBool, "bool"},
};

// How a dtype is stored in the file: the same bytes torch holds in memory (little endian), so
// data moves with pwrite/pread and no HDF5 conversion. bfloat16 has no HDF5 or numpy type: its
// bits are stored as uint16 and the "dtype" attribute says "bfloat16"; bool is stored as uint8.
hid_t file_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return H5T_IEEE_F32LE;
    case torch::kDouble: return H5T_IEEE_F64LE;
    case torch::kHalf: return half_type();
    case torch::kBFloat16: return H5T_STD_U16LE;
    case torch::kInt8: return H5T_STD_I8LE;
    case torch::kUInt8: return H5T_STD_U8LE;
    case torch::kInt16: return H5T_STD_I16LE;
    case torch::kInt32: return H5T_STD_I32LE;
    case torch::kInt64: return H5T_STD_I64LE;
    case torch::kBool: return H5T_STD_U8LE;
    default: return -1;
  }
}

// The memory type HDF5 converts to when reading through H5Dread (same layout as torch's).
hid_t memory_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return H5T_NATIVE_FLOAT;
    case torch::kDouble: return H5T_NATIVE_DOUBLE;
    case torch::kHalf: return half_type();
    case torch::kBFloat16: return H5T_NATIVE_UINT16;
    case torch::kInt8: return H5T_NATIVE_INT8;
    case torch::kUInt8: return H5T_NATIVE_UINT8;
    case torch::kInt16: return H5T_NATIVE_INT16;
    case torch::kInt32: return H5T_NATIVE_INT32;
    case torch::kInt64: return H5T_NATIVE_INT64;
    case torch::kBool: return H5T_NATIVE_UINT8;
    default: return -1;
  }
}

// A dtype for a dataset without a "dtype" attribute (written by another tool).
std::optional<torch::ScalarType> infer_dtype(hid_t type) {
  const std::size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      if (size == 2) return torch::kHalf;
      if (size == 4) return torch::kFloat;
      if (size == 8) return torch::kDouble;
      return std::nullopt;
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      if (size == 1) return is_signed ? torch::kInt8 : torch::kUInt8;
      if (size == 2 && is_signed) return torch::kInt16;
      if (size == 4 && is_signed) return torch::kInt32;
      if (size == 8 && is_signed) return torch::kInt64;
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

void write_string_attr(hid_t object, const char* name, const std::string& value,
                       const std::string& where) {
  data::h5::write_attr<CheckpointError>(object, name, value, where);
}

void write_int_attr(hid_t object, const char* name, std::int64_t value, const std::string& where) {
  data::h5::write_attr<CheckpointError>(object, name, value, where);
}

std::vector<hsize_t> to_hsize(const std::vector<std::int64_t>& shape) {
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

hid_t make_space(const std::vector<std::int64_t>& shape, const std::string& where) {
  if (shape.empty()) return CKPT_H5(H5Screate(H5S_SCALAR), where);
  const auto dims = to_hsize(shape);
  return CKPT_H5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), where);
}

std::vector<std::int64_t> space_shape(hid_t space, const std::string& where) {
  const int rank = CKPT_H5(H5Sget_simple_extent_ndims(space), where);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) CKPT_H5(H5Sget_simple_extent_dims(space, dims.data(), nullptr), where);
  return std::vector<std::int64_t>(dims.begin(), dims.end());
}

}  // namespace

std::string dtype_name(torch::ScalarType dtype, const std::string& what) {
  for (const TypeInfo& t : kTypes) {
    if (t.dtype == dtype) return t.name;
  }
  throw CheckpointError(str(what, ": dtype ", c10::toString(dtype),
                            " cannot be stored in a checkpoint (supported: float32, float64, "
                            "float16, bfloat16, int8/16/32/64, uint8, bool): convert it first"));
}

std::optional<torch::ScalarType> dtype_from_name(const std::string& name) {
  for (const TypeInfo& t : kTypes) {
    if (name == t.name) return t.dtype;
  }
  return std::nullopt;
}

std::map<std::string, std::uint64_t> create_tensor_file(const std::string& path,
                                                        const std::vector<DatasetSpec>& datasets,
                                                        std::int64_t step) {
  auto hold = data::lock_hdf5();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string where = str("checkpoint file '", path, "'");
  std::map<std::string, std::uint64_t> offsets;
  Handle fapl(CKPT_H5(H5Pcreate(H5P_FILE_ACCESS), where), H5Pclose);
  CKPT_H5(H5Pset_alignment(fapl.get(), kAlignThreshold, kAlignment), where);
  Handle file(CKPT_H5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()), where),
              H5Fclose);
  write_string_attr(file.get(), "format", kFormatName, where);
  write_int_attr(file.get(), "format_version", kFormatVersion, where);
  write_int_attr(file.get(), "step", step, where);
  Handle lcpl(CKPT_H5(H5Pcreate(H5P_LINK_CREATE), where), H5Pclose);
  CKPT_H5(H5Pset_create_intermediate_group(lcpl.get(), 1), where);
  Handle dcpl(CKPT_H5(H5Pcreate(H5P_DATASET_CREATE), where), H5Pclose);
  // Contiguous and allocated now, so the offset is known before any data exists; never filled,
  // since every byte is written by one of the ranks.
  CKPT_H5(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), where);
  CKPT_H5(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), where);
  CKPT_H5(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), where);
  for (const DatasetSpec& spec : datasets) {
    const std::string what = str(where, ", dataset ", spec.path);
    const auto dtype = dtype_from_name(spec.dtype);
    if (!dtype) throw CheckpointError(str(what, ": unknown dtype '", spec.dtype, "'"));
    Handle space(make_space(spec.shape, what), H5Sclose);
    Handle dataset(CKPT_H5(H5Dcreate2(file.get(), spec.path.c_str(), file_type(*dtype), space.get(),
                                      lcpl.get(), dcpl.get(), H5P_DEFAULT),
                           what),
                   H5Dclose);
    write_string_attr(dataset.get(), "dtype", spec.dtype, what);
    const haddr_t offset = H5Dget_offset(dataset.get());
    if (offset != HADDR_UNDEF) offsets[spec.path] = offset;
  }
  CKPT_H5(file.close(), where);
  return offsets;
}

void write_rng_file(const std::string& path, const std::vector<std::uint8_t>& states,
                    int world_size, std::int64_t bytes_per_rank, std::int64_t step) {
  auto hold = data::lock_hdf5();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string where = str("checkpoint file '", path, "'");
  Handle file(CKPT_H5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), where),
              H5Fclose);
  write_string_attr(file.get(), "format", kFormatName, where);
  write_int_attr(file.get(), "format_version", kFormatVersion, where);
  write_int_attr(file.get(), "step", step, where);
  Handle space(make_space({world_size, bytes_per_rank}, where), H5Sclose);
  Handle dataset(CKPT_H5(H5Dcreate2(file.get(), "cpu", H5T_STD_U8LE, space.get(), H5P_DEFAULT,
                                    H5P_DEFAULT, H5P_DEFAULT),
                         where),
                 H5Dclose);
  write_string_attr(dataset.get(), "dtype", "uint8", where);
  write_string_attr(dataset.get(), "description",
                    "CPU generator state of each world rank (torch.get_rng_state() in Python), "
                    "row = world rank",
                    where);
  if (!states.empty()) {
    CKPT_H5(H5Dwrite(dataset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, states.data()),
            where);
  }
  CKPT_H5(dataset.close(), where);
  CKPT_H5(file.close(), where);
}

std::vector<std::optional<DatasetLayout>> describe_datasets(
    const std::string& path, const std::vector<std::string>& datasets) {
  auto hold = data::lock_hdf5();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string where = str("'", path, "'");
  std::vector<std::optional<DatasetLayout>> out;
  io::require_regular(path);  // H5Fis_hdf5 opens the file: a FIFO would block it
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw CheckpointError(str(where, " is not an HDF5 file (no HDF5 signature found)"));
  }
  Handle file(CKPT_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), where), H5Fclose);
  for (const std::string& name : datasets) {
    const std::string what = str(where, ", dataset ", name);
    // Walk the path one link at a time: H5Lexists fails on a missing intermediate group.
    bool present = true;
    std::string prefix;
    std::size_t pos = 1;
    while (present && pos <= name.size()) {
      const std::size_t next = name.find('/', pos);
      prefix = name.substr(0, next == std::string::npos ? name.size() : next);
      present = H5Lexists(file.get(), prefix.c_str(), H5P_DEFAULT) > 0;
      pos = next == std::string::npos ? name.size() + 1 : next + 1;
    }
    H5Eclear2(H5E_DEFAULT);
    if (!present) {
      out.emplace_back(std::nullopt);
      continue;
    }
    Handle dataset(CKPT_H5(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), what), H5Dclose);
    Handle space(CKPT_H5(H5Dget_space(dataset.get()), what), H5Sclose);
    Handle type(CKPT_H5(H5Dget_type(dataset.get()), what), H5Tclose);
    Handle dcpl(CKPT_H5(H5Dget_create_plist(dataset.get()), what), H5Pclose);
    DatasetLayout layout;
    layout.shape = space_shape(space.get(), what);
    const auto attr = data::h5::read_string_attr<CheckpointError>(dataset.get(), "dtype", what);
    std::optional<torch::ScalarType> dtype =
        attr ? dtype_from_name(*attr) : infer_dtype(type.get());
    layout.dtype = dtype ? h5::dtype_name(*dtype, what) : std::string("unsupported");
    layout.element_size = static_cast<std::int64_t>(H5Tget_size(type.get()));
    const bool contiguous =
        H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl.get()) == 0;
    const haddr_t offset = H5Dget_offset(dataset.get());
    if (contiguous && offset != HADDR_UNDEF) layout.offset = offset;
    layout.raw_ok = dtype && H5Tequal(type.get(), file_type(*dtype)) > 0 &&
                    layout.element_size == static_cast<std::int64_t>(c10::elementSize(*dtype));
    H5Eclear2(H5E_DEFAULT);
    out.emplace_back(std::move(layout));
  }
  return out;
}

void read_slab_hdf5(const std::string& path, const std::string& dataset_path, int split_dim,
                    std::int64_t begin, std::int64_t end, torch::Tensor& out) {
  auto hold = data::lock_hdf5();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string where = str("'", path, "', dataset ", dataset_path);
  io::require_regular(path);
  Handle file(CKPT_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), where), H5Fclose);
  Handle dataset(CKPT_H5(H5Dopen2(file.get(), dataset_path.c_str(), H5P_DEFAULT), where), H5Dclose);
  Handle file_space(CKPT_H5(H5Dget_space(dataset.get()), where), H5Sclose);
  const auto shape = space_shape(file_space.get(), where);
  if (split_dim >= 0) {
    std::vector<hsize_t> start(shape.size(), 0);
    std::vector<hsize_t> count = to_hsize(shape);
    start[split_dim] = static_cast<hsize_t>(begin);
    count[split_dim] = static_cast<hsize_t>(end - begin);
    CKPT_H5(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            where);
  }
  Handle mem_space(make_space(out.sizes().vec(), where), H5Sclose);
  if (out.numel() == 0) return;
  CKPT_H5(H5Dread(dataset.get(), memory_type(out.scalar_type()), mem_space.get(), file_space.get(),
                  H5P_DEFAULT, out.data_ptr()),
          where);
}

torch::Tensor read_rng(const std::string& path, int row) {
  auto hold = data::lock_hdf5();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string where = str("'", path, "', dataset /cpu");
  io::require_regular(path);
  Handle file(CKPT_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), where), H5Fclose);
  Handle dataset(CKPT_H5(H5Dopen2(file.get(), "cpu", H5P_DEFAULT), where), H5Dclose);
  Handle file_space(CKPT_H5(H5Dget_space(dataset.get()), where), H5Sclose);
  const auto shape = space_shape(file_space.get(), where);
  if (shape.size() != 2 || row >= shape[0]) {
    throw CheckpointError(str(where, ": expected a [world_size, bytes] uint8 dataset with a row ",
                              "for world rank ", row, ", found shape ", c10::IntArrayRef(shape)));
  }
  std::vector<std::int64_t> out_shape = shape;
  if (row >= 0) {
    const hsize_t start[2] = {static_cast<hsize_t>(row), 0};
    const hsize_t count[2] = {1, static_cast<hsize_t>(shape[1])};
    CKPT_H5(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr),
            where);
    out_shape = {shape[1]};
  }
  torch::Tensor out = torch::empty(out_shape, torch::kUInt8);
  Handle mem_space(make_space(out_shape, where), H5Sclose);
  if (out.numel() > 0) {
    CKPT_H5(H5Dread(dataset.get(), H5T_NATIVE_UINT8, mem_space.get(), file_space.get(), H5P_DEFAULT,
                    out.data_ptr()),
            where);
  }
  return out;
}

std::string library_version() {
  // Even this call enters HDF5's API (it pushes an API context from HDF5's free lists), and this
  // HDF5 is not thread-safe: unlocked, it ran on the checkpoint writer thread while the
  // prefetcher read training data, and corrupted the free lists that HDF5 frees at exit
  // (glibc: "corrupted size vs. prev_size" in H5FL_garbage_coll under MPI_Finalize).
  auto hold = data::lock_hdf5();
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return str(major, ".", minor, ".", release);
}

}  // namespace hpctrain::checkpoint::h5
