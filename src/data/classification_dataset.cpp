// Classification files: /inputs (N x ..., uint8 with a scale, or float32) and /labels (N, int64).
// Reads gather a request's rows run by run (neighbours coalesced, one single-block hyperslab each)
// into a reused buffer, then scale them into float32 in the requested order.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "dataset_internal.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::detail {
namespace {

// Class indices beyond this are damage, not classes (a model's output layer could not hold them);
// the bound also keeps every per-class allocation (inspect's histogram) small.
constexpr std::int64_t kMaxClasses = std::int64_t{1} << 24;

class ClassificationDataset final : public Dataset {
 public:
  ClassificationDataset(h5::Handle file, h5::Handle inputs, h5::Handle labels, DatasetInfo info,
                        std::string label, std::vector<std::int64_t> labels_in_memory,
                        bool uint8_inputs)
      : file_(std::move(file)),
        inputs_(std::move(inputs)),
        labels_(std::move(labels)),
        info_(std::move(info)),
        label_(std::move(label)),
        labels_in_memory_(std::move(labels_in_memory)),
        uint8_inputs_(uint8_inputs) {
    dims_.push_back(info_.num_samples);
    dims_.insert(dims_.end(), info_.sample_shape.begin(), info_.sample_shape.end());
    inputs_space_ = h5::Handle(HPCTRAIN_H5(H5Dget_space(inputs_.get()), where_inputs()), H5Sclose);
    for (int v = 0; v < 256; ++v) lut_[v] = static_cast<float>(v * info_.input_scale);
  }

  ~ClassificationDataset() override {
    auto hold = lock_hdf5();
    inputs_space_.reset();
    inputs_.reset();
    labels_.reset();
    file_.reset();
  }

  const DatasetInfo& info() const override { return info_; }

  Batch read(const std::vector<std::int64_t>& indices) override {
    auto hold = lock_hdf5();
    const SortedRequest request = sort_request(indices, info_.num_samples, label_);
    const auto rows = static_cast<std::int64_t>(request.unique.size());
    const auto batch = static_cast<std::int64_t>(indices.size());
    const std::int64_t row_elements = info_.sample_bytes / (uint8_inputs_ ? 1 : 4);

    std::vector<std::int64_t> shape{batch};
    shape.insert(shape.end(), info_.sample_shape.begin(), info_.sample_shape.end());
    Batch out;
    out.indices = indices;
    out.inputs = torch::empty(shape, torch::kFloat);
    out.targets = torch::empty({batch}, torch::kLong);
    if (batch == 0) return out;

    // Float inputs already in request order need no staging copy.
    const bool direct = !uint8_inputs_ && request.identity && info_.input_scale == 1.0;
    void* target = out.inputs.data_ptr<float>();
    if (!direct) {
      raw_.resize(static_cast<std::size_t>(rows * info_.sample_bytes));
      target = raw_.data();
    }
    read_runs(inputs_.get(), inputs_space_.get(), dims_, request.runs,
              uint8_inputs_ ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, target, where_inputs());

    float* dst = out.inputs.data_ptr<float>();
    if (!direct) {
      for (std::int64_t k = 0; k < batch; ++k) {
        const std::int64_t row =
            request.identity ? k : request.row_of_request[static_cast<std::size_t>(k)];
        float* out_row = dst + k * row_elements;
        if (uint8_inputs_) {
          const std::uint8_t* src = raw_.data() + row * row_elements;
          for (std::int64_t e = 0; e < row_elements; ++e) out_row[e] = lut_[src[e]];
        } else {
          const auto* src = reinterpret_cast<const float*>(raw_.data()) + row * row_elements;
          const auto scale = static_cast<float>(info_.input_scale);
          for (std::int64_t e = 0; e < row_elements; ++e) out_row[e] = src[e] * scale;
        }
      }
    }

    std::int64_t* labels_out = out.targets.data_ptr<std::int64_t>();
    if (!labels_in_memory_.empty()) {
      for (std::int64_t k = 0; k < batch; ++k) {
        labels_out[k] =
            labels_in_memory_[static_cast<std::size_t>(indices[static_cast<std::size_t>(k)])];
      }
    } else {
      label_rows_.resize(static_cast<std::size_t>(rows));
      h5::Handle space(HPCTRAIN_H5(H5Dget_space(labels_.get()), where_labels()), H5Sclose);
      read_runs(labels_.get(), space.get(), {info_.num_samples}, request.runs, H5T_NATIVE_INT64,
                label_rows_.data(), where_labels());
      for (std::int64_t k = 0; k < batch; ++k) {
        const std::int64_t row =
            request.identity ? k : request.row_of_request[static_cast<std::size_t>(k)];
        const std::int64_t value = label_rows_[static_cast<std::size_t>(row)];
        if (value < 0 || value >= info_.num_classes) {
          throw DataError(str(where_labels(), ": label ", value, " at index ",
                              indices[static_cast<std::size_t>(k)], " is outside [0, ",
                              info_.num_classes, "): the file changed after it was opened?"));
        }
        labels_out[k] = value;
      }
    }
    return out;
  }

 private:
  std::string where_inputs() const { return str(label_, ", dataset /inputs"); }
  std::string where_labels() const { return str(label_, ", dataset /labels"); }

  h5::Handle file_;
  h5::Handle inputs_;
  h5::Handle labels_;
  h5::Handle inputs_space_;
  DatasetInfo info_;
  std::string label_;
  std::vector<std::int64_t> labels_in_memory_;
  bool uint8_inputs_;
  std::vector<std::int64_t> dims_;
  std::vector<std::uint8_t> raw_;
  std::vector<std::int64_t> label_rows_;
  float lut_[256];
};

// The shapes and element types of /inputs and /labels, and their sample counts, agree with a
// classification file.
void check_classification_layout(const std::string& label, const std::string& where_inputs,
                                 const std::string& where_labels,
                                 const std::vector<std::int64_t>& input_dims,
                                 const std::vector<std::int64_t>& label_dims,
                                 const std::string& input_dtype, const std::string& label_dtype) {
  if (input_dims.size() < 2) {
    throw DataError(str(where_inputs,
                        ": expected rank >= 2 (N samples x sample dims, e.g. (N, 1, "
                        "28, 28)), found rank ",
                        input_dims.size(), " with shape ", h5::shape_string(input_dims),
                        ": store one row per sample"));
  }
  if (input_dtype != "uint8" && input_dtype != "float32") {
    throw DataError(str(where_inputs,
                        ": expected dtype uint8 (with a scale attribute) or float32, "
                        "found ",
                        input_dtype,
                        ": convert it, e.g. with h5py: f['inputs'] = x.astype('float32')"));
  }
  if (label_dims.size() != 1) {
    throw DataError(str(where_labels,
                        ": expected rank 1 (one int64 class index per sample), found "
                        "rank ",
                        label_dims.size(), " with shape ", h5::shape_string(label_dims),
                        ": store class indices, not one-hot rows"));
  }
  if (label_dtype.rfind("int", 0) != 0 && label_dtype.rfind("uint", 0) != 0) {
    throw DataError(str(where_labels, ": expected dtype int64 (class indices), found ", label_dtype,
                        ": convert it, e.g. with h5py: f['labels'] = y.astype('int64')"));
  }
  const std::int64_t n = input_dims[0];
  if (label_dims[0] != n) {
    throw DataError(str(label, ": /labels holds ", label_dims[0], " labels but /inputs holds ", n,
                        " samples: every sample needs exactly one label"));
  }
  if (n == 0)
    throw DataError(
        str(where_inputs, ": holds no samples (shape ", h5::shape_string(input_dims), ")"));
}

// One pass over labels [0, scan_end) of the n in `labels`: each must be a class index (below
// num_classes, or kMaxClasses when 0; `declared`: the file's attribute says num_classes). Copies
// them into `kept` when given. Returns the largest label (-1 for none).
std::int64_t scan_labels(hid_t labels, std::int64_t n, std::int64_t scan_end,
                         std::int64_t num_classes, bool declared, const std::string& where_labels,
                         std::int64_t* kept) {
  std::vector<std::int64_t> block(static_cast<std::size_t>(std::min(n, kScanBlock)));
  h5::Handle label_space(HPCTRAIN_H5(H5Dget_space(labels), where_labels), H5Sclose);
  std::int64_t max_label = -1;
  for (std::int64_t begin = 0; begin < scan_end; begin += kScanBlock) {
    const std::int64_t count = std::min(kScanBlock, n - begin);
    std::int64_t* dst = kept != nullptr ? kept + begin : block.data();
    select_rows(label_space.get(), {{begin, count}}, {n}, where_labels);
    const hsize_t mem_count = static_cast<hsize_t>(count);
    h5::Handle mem(HPCTRAIN_H5(H5Screate_simple(1, &mem_count, nullptr), where_labels), H5Sclose);
    HPCTRAIN_H5(H5Dread(labels, H5T_NATIVE_INT64, mem.get(), label_space.get(), H5P_DEFAULT, dst),
                where_labels);
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t value = dst[i];
      // Unsigned labels above INT64_MAX arrive saturated by HDF5's conversion: out of range too.
      if (value < 0 || (num_classes > 0 && value >= num_classes) ||
          (num_classes == 0 && value >= kMaxClasses)) {
        throw DataError(str(where_labels, ": label ", value, " at index ", begin + i,
                            value == std::numeric_limits<std::int64_t>::max()
                                ? " (or beyond: an unsigned label above 2^63-1)"
                                : "",
                            " is outside [0, ", num_classes > 0 ? num_classes : kMaxClasses, ")",
                            declared          ? " (attribute num_classes)"
                            : num_classes > 0 ? " (the model's classes)"
                                              : " (the most classes hpctrain supports)",
                            ": labels must be class indices 0..num_classes-1; fix the file or "
                            "its num_classes attribute"));
      }
      max_label = std::max(max_label, value);
    }
  }
  return max_label;
}

}  // namespace

std::unique_ptr<Dataset> open_classification(h5::Handle file, const std::string& path,
                                             const DatasetExpectation& expect,
                                             const ReadOptions& options) {
  const std::string label = file_label(path, expect.config_key);
  const std::string where_inputs = str(label, ", dataset /inputs");
  const std::string where_labels = str(label, ", dataset /labels");
  h5::Handle inputs_probe(HPCTRAIN_H5(H5Dopen2(file.get(), "inputs", H5P_DEFAULT), where_inputs),
                          H5Dclose);
  h5::Handle labels(HPCTRAIN_H5(H5Dopen2(file.get(), "labels", H5P_DEFAULT), where_labels),
                    H5Dclose);
  const auto input_dims = h5::dataset_dims(inputs_probe.get(), where_inputs);
  const auto label_dims = h5::dataset_dims(labels.get(), where_labels);
  const std::string input_dtype = dtype_of(inputs_probe.get(), where_inputs);
  const std::string label_dtype = dtype_of(labels.get(), where_labels);

  check_classification_layout(label, where_inputs, where_labels, input_dims, label_dims,
                              input_dtype, label_dtype);
  require_sample_values(where_inputs, input_dims);
  const std::int64_t n = input_dims[0];

  DatasetInfo info;
  info.path = path;
  info.kind = DatasetKind::kClassification;
  info.num_samples = n;
  info.sample_shape.assign(input_dims.begin() + 1, input_dims.end());
  info.input_dtype = input_dtype;
  const std::int64_t element_bytes = input_dtype == "uint8" ? 1 : 4;
  info.sample_bytes = element_bytes;
  for (auto d : info.sample_shape) info.sample_bytes *= d;

  auto scale = number_attr(inputs_probe.get(), file.get(), "scale", where_inputs);
  info.input_scale = scale.value_or(input_dtype == "uint8" ? 1.0 / 255.0 : 1.0);
  if (!std::isfinite(info.input_scale)) {
    throw DataError(str(where_inputs, ": attribute scale = ", info.input_scale,
                        " is not finite: set it to the factor that maps stored values to model "
                        "inputs (1/255 for 8-bit images)"));
  }

  auto file_classes = number_attr(labels.get(), file.get(), "num_classes", where_labels);
  if (file_classes && (*file_classes < 1 || *file_classes != std::floor(*file_classes))) {
    throw DataError(str(where_labels, ": attribute num_classes = ", *file_classes,
                        " should be a positive integer"));
  }
  if (file_classes && *file_classes > static_cast<double>(kMaxClasses)) {
    throw DataError(str(where_labels, ": attribute num_classes = ", *file_classes,
                        " is more than hpctrain supports (", kMaxClasses,
                        "): the attribute is damaged, or the labels are not class indices"));
  }
  std::int64_t num_classes = file_classes ? static_cast<std::int64_t>(*file_classes) : 0;
  if (expect.num_classes > 0 && num_classes > 0 && num_classes != expect.num_classes) {
    throw DataError(str(label, ": the file has num_classes = ", num_classes,
                        " but the model expects ", expect.num_classes,
                        ": use the file prepared for this model, or set the model's number of "
                        "classes to ",
                        num_classes));
  }
  if (num_classes == 0) num_classes = expect.num_classes;

  // One pass over the labels: range check, and a copy to keep when it is small.
  std::vector<std::int64_t> all_labels;
  // Labels kept in memory cost no HDF5 call per batch.
  const bool keep = n <= options.max_labels_in_memory;
  if (keep) all_labels.resize(static_cast<std::size_t>(n));
  // A file validated already in this run (options.trusted) is only read for the labels it keeps.
  const std::int64_t scan_end = options.trusted && !keep ? 0 : n;
  const std::int64_t max_label =
      scan_labels(labels.get(), n, scan_end, num_classes, file_classes.has_value(), where_labels,
                  keep ? all_labels.data() : nullptr);
  info.num_classes = num_classes > 0 ? num_classes : max_label + 1;
  info.classes_declared = file_classes.has_value();

  if (n < expect.min_samples) {
    throw DataError(str(label, ": holds ", n, " samples, fewer than one global batch of ",
                        expect.min_samples,
                        " (data.batch_size x data-parallel ranks): use a smaller data.batch_size, "
                        "fewer ranks, or a larger file"));
  }

  inputs_probe.reset();
  h5::Handle inputs = open_cached(file.get(), "inputs", element_bytes, options, where_inputs, info);
  return std::make_unique<ClassificationDataset>(std::move(file), std::move(inputs),
                                                 std::move(labels), std::move(info), label,
                                                 std::move(all_labels), input_dtype == "uint8");
}

}  // namespace hpctrain::data::detail
