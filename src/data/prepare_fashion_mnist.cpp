// Fashion-MNIST IDX files -> train.h5 / test.h5.

#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/data/idx_file.hpp"
#include "hpctrain/data/prepare.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
constexpr std::int64_t kClasses = 10;
constexpr std::int64_t kSide = 28;

bool is_file(const std::string& path) {
  return runtime::path_type(path) == runtime::PathType::kRegular;
}

// "train-images-idx3-ubyte" -> the .gz file, else the uncompressed one, else the .gz name (so the
// error names what we looked for first).
std::string idx_path(const std::string& dir, const std::string& stem) {
  const std::string gz = dir + "/" + stem + ".gz";
  if (is_file(gz)) return gz;
  const std::string plain = dir + "/" + stem;
  return is_file(plain) ? plain : gz;
}

struct Split {
  std::string images_path, labels_path;
  IdxArray images, labels;
};

Split load_split(const std::string& from_dir, const std::string& prefix) {
  const std::string images_path = idx_path(from_dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = idx_path(from_dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  if (images.dims[1] != kSide || images.dims[2] != kSide) {
    throw DataError(str("IDX file '", images_path, "' holds ", images.dims[1], " x ",
                        images.dims[2],
                        " images, expected 28 x 28 (Fashion-MNIST): is it the "
                        "right file?"));
  }
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(str("IDX files '", images_path, "' and '", labels_path,
                        "' disagree: ", images.dims[0], " images but ", labels.dims[0],
                        " labels: they must come from the same release"));
  }
  if (images.dims[0] == 0) throw DataError(str("IDX file '", images_path, "' holds no images"));
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kClasses) {
      throw DataError(str("IDX file '", labels_path, "': label ", int{labels.data[i]}, " at index ",
                          i, " is outside 0..9 (Fashion-MNIST has 10 classes)"));
    }
  }
  return {images_path, labels_path, std::move(images), std::move(labels)};
}

PreparedFile write_split(Split& split, const std::string& out_path, const std::string& created_by) {
  const std::int64_t n = split.images.dims[0];
  auto inputs = torch::from_blob(split.images.data.data(), {n, 1, kSide, kSide}, torch::kByte);
  auto targets = torch::from_blob(split.labels.data.data(), {n}, torch::kByte).to(torch::kLong);
  Provenance provenance;
  provenance.source = str("Fashion-MNIST (Zalando Research), IDX files ", split.images_path,
                          " and ", split.labels_path);
  provenance.created_by = created_by;
  write_classification_file(out_path, inputs, targets, kClasses, 1.0 / 255.0, provenance);
  return {out_path, str(n, " images 1x28x28 uint8, 10 classes"), n};
}

}  // namespace

std::string find_fashion_mnist_dir() {
  // dpkg knows where the package put its files, which is the one place that cannot drift.
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(
      ::popen("dpkg -L dataset-fashion-mnist 2>/dev/null", "r"), ::pclose);
  if (pipe) {
    std::array<char, 4096> line{};
    while (std::fgets(line.data(), static_cast<int>(line.size()), pipe.get())) {
      std::string path(line.data());
      while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
      const std::string name = "/train-images-idx3-ubyte.gz";
      if (path.size() > name.size() &&
          path.compare(path.size() - name.size(), name.size(), name) == 0 && is_file(path)) {
        return path.substr(0, path.size() - name.size());
      }
    }
  }
  if (is_file(idx_path(kDefaultDir, "train-images-idx3-ubyte"))) return kDefaultDir;
  throw DataError(
      str("Fashion-MNIST IDX files not found (dpkg -L dataset-fashion-mnist lists "
          "none, and ",
          kDefaultDir,
          " does not hold them): install them with "
          "`apt-get install dataset-fashion-mnist` (scripts/setup.sh does), or pass "
          "--from DIR with train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
          "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz"));
}

std::vector<PreparedFile> prepare_fashion_mnist(const std::string& from_dir,
                                                const std::string& out_dir,
                                                const std::string& created_by) {
  // Validate every input before writing anything, so a bad file leaves no partial output.
  Split train = load_split(from_dir, "train");
  Split test = load_split(from_dir, "t10k");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    throw DataError(str("output directory '", out_dir, "' cannot be created: ", ec.message()));
  }
  std::vector<PreparedFile> out;
  out.push_back(write_split(train, out_dir + "/train.h5", created_by));
  out.push_back(write_split(test, out_dir + "/test.h5", created_by));
  return out;
}

}  // namespace hpctrain::data
