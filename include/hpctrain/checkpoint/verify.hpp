#pragma once
// Finding and verifying checkpoints without loading them: what resolve("auto") and
// `hpctrain inspect checkpoint` build on. Everything here is local (no MPI) and reads files only.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace hpctrain::checkpoint {

/// Result of verifying one checkpoint directory.
struct Verification {
  bool ok = false;
  /// Why it failed, naming the file and what was expected and found:
  /// "missing manifest.json", "model.h5: checksum mismatch (manifest xxh3 ..., file ...)".
  std::string reason;
};

/// Checks a checkpoint directory: manifest.json present, parseable, of a known format version
/// and with a valid self-checksum; every file it lists present with the recorded size and xxh3
/// checksum (each file read once); every HDF5 file openable and holding each listed tensor with
/// its recorded shape. Local. Holds the process-wide HDF5 lock while it calls HDF5.
Verification verify(const std::string& dir);

/// Checks one file that the (parsed) `manifest` of checkpoint `dir` lists: a regular file with
/// the recorded size and xxh3. Returns the reason it fails ("config.yaml: checksum mismatch
/// ..."), empty when it verifies. Lets a reader check a small file before parsing it without
/// checksumming the whole checkpoint. Local.
std::string verify_file(const std::string& dir, const nlohmann::json& manifest,
                        const std::string& name);

/// Committed checkpoints of a run (<run_dir>/checkpoints/step_<N> directories; never temporary
/// ones), newest (highest step) first, as full paths. Local; does not verify them.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

/// The checkpoint directory the `latest` pointer of a run names (full path), or nullopt when the
/// pointer is absent, empty, or names something that is not a step_<N> directory name. Local;
/// does not check that the directory exists.
std::optional<std::string> read_latest(const std::string& run_dir);

/// `path` itself when it is a checkpoint directory (has a manifest.json), else the checkpoint the
/// `latest` pointer of `path` (a run directory) or of its parent (a checkpoints/ directory)
/// names. Throws CheckpointError saying what to pass otherwise. Local; does not verify.
std::string checkpoint_dir_of(const std::string& path);

/// What CheckpointManager::resolve() decides, computed locally (it runs this on world rank 0
/// and broadcasts the result).
struct ResumeChoice {
  std::optional<std::string> path;   ///< the checkpoint to load; nullopt: start from scratch
  std::string error;                 ///< set when `resume` names a checkpoint that does not verify
  std::vector<std::string> skipped;  ///< "<dir>: <reason>" for each candidate that failed
};

/// A reader's own check of a verified manifest: "" when the reader can use it, else what is wrong
/// ("trainer_state.epoch is 99 but ..."). A manifest edited and resealed verifies by checksum;
/// its impossible values count like a checksum mismatch (docs/CHECKPOINTS.md, "Trust").
using ManifestCheck = std::function<std::string(const nlohmann::json& manifest)>;

/// resume = "none" (or empty): nothing. "auto": the checkpoint `latest` names if it verifies,
/// else the newest committed one that verifies, else nothing. Any other value: that directory
/// (a path, or a step_<N> name inside <run_dir>/checkpoints), or `error` saying why it does not
/// verify. A checkpoint verifies when its files do and `check` (if any) finds nothing wrong in its
/// manifest. Never picks a temporary directory. Local (reads and checksums the files).
ResumeChoice choose_resume(const std::string& run_dir, const std::string& resume,
                           const ManifestCheck& check = {});

}  // namespace hpctrain::checkpoint
