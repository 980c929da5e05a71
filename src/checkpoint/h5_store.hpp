#pragma once
// Private HDF5 side of the checkpoint layer: how each torch dtype is stored (so h5py reads it),
// creating a tensor file whose datasets are contiguous and allocated up front (their file offsets
// are then written with pwrite by whichever rank holds the data), and looking datasets up for
// verification and loading. Every function here takes the process-wide HDF5 lock
// (data::lock_hdf5()) itself and releases every HDF5 object before returning.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hpctrain::checkpoint::h5 {

/// A dataset's description, as created or as found.
struct DatasetSpec {
  std::string path;                 ///< absolute HDF5 path ("/fc1.weight")
  std::string dtype;                ///< torch dtype name as in the manifest ("float32")
  std::vector<std::int64_t> shape;  ///< logical shape ({} for a scalar)
};

/// Where a dataset's bytes are, when they are one contiguous, unconverted, little-endian block.
struct DatasetLayout {
  std::vector<std::int64_t> shape;
  std::string dtype;                    ///< from the "dtype" attribute, or the HDF5 type
  std::optional<std::uint64_t> offset;  ///< byte offset; nullopt: not contiguous / not allocated
  std::int64_t element_size = 0;
  bool raw_ok = false;  ///< stored exactly as torch holds `dtype` in memory: pread works
};

/// "float32", "bfloat16", ...: the manifest's name of a dtype; throws CheckpointError naming
/// `what` for dtypes checkpoints do not store (complex, quantized). Local.
std::string dtype_name(torch::ScalarType dtype, const std::string& what);
/// The torch dtype of a manifest dtype name; nullopt when unknown. Local.
std::optional<torch::ScalarType> dtype_from_name(const std::string& name);

/// Creates the HDF5 file `path` (which must not exist) holding `datasets`: contiguous, allocated
/// at creation, never filled (every byte is written by a rank later), each with a "dtype"
/// attribute, 4 KiB-aligned when large. File attributes: format, format_version, step. Returns
/// each dataset's byte offset (absent for empty datasets). Throws CheckpointError. Local.
std::map<std::string, std::uint64_t> create_tensor_file(const std::string& path,
                                                        const std::vector<DatasetSpec>& datasets,
                                                        std::int64_t step);

/// Writes the RNG file: dataset /cpu uint8 [world_size, bytes] (rows in world-rank order).
/// Local.
void write_rng_file(const std::string& path, const std::vector<std::uint8_t>& states,
                    int world_size, std::int64_t bytes_per_rank, std::int64_t step);

/// Opens `path` read-only and describes each of `datasets` (absolute paths); a missing dataset
/// gives nullopt. Throws CheckpointError when the file does not open as HDF5. Local.
std::vector<std::optional<DatasetLayout>> describe_datasets(
    const std::string& path, const std::vector<std::string>& datasets);

/// Reads the hyperslab [begin, end) along `split_dim` (the whole dataset when split_dim < 0)
/// of dataset `dataset` in `path` through HDF5 (type conversion included) into `out`, a
/// contiguous CPU tensor of the saved dtype and the slab's shape. For files that were rewritten
/// by other tools (chunked, compressed). Local.
void read_slab_hdf5(const std::string& path, const std::string& dataset, int split_dim,
                    std::int64_t begin, std::int64_t end, torch::Tensor& out);

/// Reads /cpu of an RNG file: row `row` (uint8) or, with row < 0, every row. Local.
torch::Tensor read_rng(const std::string& path, int row);

/// The HDF5 library version ("1.10.8"). Local.
std::string library_version();

}  // namespace hpctrain::checkpoint::h5
