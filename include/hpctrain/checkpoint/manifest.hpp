#pragma once
// The checkpoint format's names and its manifest (docs/CHECKPOINTS.md): directory names
// (step_00001200), where each tensor record lives (file and HDF5 dataset), the manifest.json that
// a checkpoint is committed with, and the xxh3 checksums it records.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace hpctrain::checkpoint {

/// Version of the on-disk format written by this build; loaders refuse newer versions.
inline constexpr int kFormatVersion = 1;
/// The manifest's "format" field: tells a checkpoint manifest from any other JSON file.
inline constexpr const char* kFormatName = "hpctrain-checkpoint";
/// Name of the manifest file inside a checkpoint directory; written last.
inline constexpr const char* kManifestFile = "manifest.json";
/// Name of the pointer file in <run_dir>/checkpoints naming the newest committed checkpoint.
inline constexpr const char* kLatestFile = "latest";
/// Marker in the names of directories that are not (or no longer) committed checkpoints:
/// step_<N>.tmp-<unique> (being written, or left by a crash) and step_<N>.tmp-<unique>-old/-del.
inline constexpr const char* kTempMarker = ".tmp-";

/// "step_00001200": the directory name of the checkpoint of `step` (8 digits, more if needed).
/// Local.
std::string step_dir_name(std::int64_t step);
/// The step of a committed checkpoint directory name ("step_00001200" -> 1200); nullopt for any
/// other name (temporary directories included). Local.
std::optional<std::int64_t> parse_step_dir_name(const std::string& name);
/// <run_dir>/checkpoints. Local.
std::string checkpoints_dir(const std::string& run_dir);

/// Where a tensor record is stored: "model/fc1.weight" -> model.h5, dataset /fc1.weight;
/// "optimizer/exp_avg/fc1.weight" -> optimizer.h5, /exp_avg/fc1.weight. The first component of
/// the record name names the file, the rest the dataset path inside it.
struct TensorLocation {
  std::string file;     ///< file name inside the checkpoint directory ("model.h5")
  std::string dataset;  ///< absolute HDF5 path ("/fc1.weight")
};

/// Maps a record name to its file and dataset. Throws CheckpointError for names that cannot be
/// stored (no '/', empty components, "." or "..", a file part other than letters, digits and
/// '_', or the reserved file "rng"). Local.
TensorLocation tensor_location(const std::string& record_name);

/// xxh3-64 of `text` as 16 lowercase hex digits (the manifest's config_xxh3). Local.
std::string xxh3_hex(const std::string& text);

/// A file's size and xxh3-64 checksum (16 hex digits), as the manifest records them.
struct FileDigest {
  std::uint64_t bytes = 0;
  std::string xxh3;
};
/// Size and xxh3-64 of a whole file, read sequentially through `buffer` (grown to at least 8 MiB
/// and reused, so repeated calls do not fault fresh pages). Throws CheckpointError naming the
/// file when it cannot be read. Local.
FileDigest digest_file(const std::string& path, std::string& buffer);

/// Serialises a manifest with its self-checksum: sets "manifest_xxh3" to the xxh3 of the
/// compact dump of every other field, so a manifest edited or damaged after writing is detected.
/// Returns the pretty-printed text to store. Local.
std::string seal_manifest(nlohmann::json manifest);
/// Parses and checks a manifest's text: valid JSON, "format" and "format_version" known, the
/// self-checksum right, the required fields present with the right types. Throws
/// CheckpointError "<what>: <problem>" saying what was expected and found. Local.
nlohmann::json parse_manifest(const std::string& text, const std::string& what);
/// Reads and parses <dir>/manifest.json (see parse_manifest). Local.
nlohmann::json read_manifest(const std::string& dir);

}  // namespace hpctrain::checkpoint
