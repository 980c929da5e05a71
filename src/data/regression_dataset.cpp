// Regression files: /inputs (N x ..., float32) and /targets (N x ..., float32). Reads gather a
// request's rows of both datasets run by run (one single-block hyperslab each) into reused
// buffers, then place them in the requested order.

#include <cmath>
#include <cstring>

#include "dataset_internal.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::detail {
namespace {

constexpr std::int64_t kScanRows = std::int64_t{1} << 16;

std::int64_t product(const std::vector<std::int64_t>& v) {
  std::int64_t n = 1;
  for (auto d : v) n *= d;
  return n;
}

class RegressionDataset final : public Dataset {
 public:
  RegressionDataset(h5::Handle file, h5::Handle inputs, h5::Handle targets, DatasetInfo info,
                    std::string label)
      : file_(std::move(file)),
        inputs_(std::move(inputs)),
        targets_(std::move(targets)),
        info_(std::move(info)),
        label_(std::move(label)) {
    input_dims_.push_back(info_.num_samples);
    input_dims_.insert(input_dims_.end(), info_.sample_shape.begin(), info_.sample_shape.end());
    target_dims_.push_back(info_.num_samples);
    target_dims_.insert(target_dims_.end(), info_.target_shape.begin(), info_.target_shape.end());
    inputs_space_ = h5::Handle(HPCTRAIN_H5(H5Dget_space(inputs_.get()), where("inputs")), H5Sclose);
    targets_space_ =
        h5::Handle(HPCTRAIN_H5(H5Dget_space(targets_.get()), where("targets")), H5Sclose);
  }

  ~RegressionDataset() override {
    auto hold = lock_hdf5();
    inputs_space_.reset();
    targets_space_.reset();
    inputs_.reset();
    targets_.reset();
    file_.reset();
  }

  const DatasetInfo& info() const override { return info_; }

  Batch read(const std::vector<std::int64_t>& indices) override {
    auto hold = lock_hdf5();
    const SortedRequest request = sort_request(indices, info_.num_samples, label_);
    const auto batch = static_cast<std::int64_t>(indices.size());
    std::vector<std::int64_t> input_shape{batch}, target_shape{batch};
    input_shape.insert(input_shape.end(), info_.sample_shape.begin(), info_.sample_shape.end());
    target_shape.insert(target_shape.end(), info_.target_shape.begin(), info_.target_shape.end());
    Batch out;
    out.indices = indices;
    out.inputs = torch::empty(input_shape, torch::kFloat);
    out.targets = torch::empty(target_shape, torch::kFloat);
    if (batch == 0) return out;
    gather(inputs_.get(), inputs_space_.get(), input_dims_, request, out.inputs, input_rows_,
           where("inputs"));
    gather(targets_.get(), targets_space_.get(), target_dims_, request, out.targets, target_rows_,
           where("targets"));
    return out;
  }

 private:
  std::string where(const char* name) const { return str(label_, ", dataset /", name); }

  // Distinct rows in ascending order into `staging`, then each requested row to its place (no
  // staging when the request was already ascending without duplicates).
  static void gather(hid_t dataset, hid_t space, const std::vector<std::int64_t>& dims,
                     const SortedRequest& request, torch::Tensor& out, std::vector<float>& staging,
                     const std::string& where) {
    const std::int64_t row = out.numel() / out.size(0);
    float* dst = out.data_ptr<float>();
    if (request.identity) {
      read_runs(dataset, space, dims, request.runs, H5T_NATIVE_FLOAT, dst, where);
      return;
    }
    staging.resize(request.unique.size() * static_cast<std::size_t>(row));
    read_runs(dataset, space, dims, request.runs, H5T_NATIVE_FLOAT, staging.data(), where);
    for (std::size_t k = 0; k < request.row_of_request.size(); ++k) {
      std::memcpy(dst + static_cast<std::int64_t>(k) * row,
                  staging.data() + request.row_of_request[k] * row,
                  static_cast<std::size_t>(row) * sizeof(float));
    }
  }

  h5::Handle file_;
  h5::Handle inputs_;
  h5::Handle targets_;
  h5::Handle inputs_space_;
  h5::Handle targets_space_;
  DatasetInfo info_;
  std::string label_;
  std::vector<std::int64_t> input_dims_;
  std::vector<std::int64_t> target_dims_;
  std::vector<float> input_rows_;
  std::vector<float> target_rows_;
};

}  // namespace

std::unique_ptr<Dataset> open_regression(h5::Handle file, const std::string& path,
                                         const DatasetExpectation& expect,
                                         const ReadOptions& options) {
  const std::string label = file_label(path, expect.config_key);
  const std::string where_inputs = str(label, ", dataset /inputs");
  const std::string where_targets = str(label, ", dataset /targets");
  h5::Handle inputs(HPCTRAIN_H5(H5Dopen2(file.get(), "inputs", H5P_DEFAULT), where_inputs),
                    H5Dclose);
  h5::Handle targets(HPCTRAIN_H5(H5Dopen2(file.get(), "targets", H5P_DEFAULT), where_targets),
                     H5Dclose);
  const auto input_dims = h5::dataset_dims(inputs.get(), where_inputs);
  const auto target_dims = h5::dataset_dims(targets.get(), where_targets);
  for (const auto& [where, dims, dtype] :
       {std::tuple{where_inputs, input_dims, dtype_of(inputs.get(), where_inputs)},
        std::tuple{where_targets, target_dims, dtype_of(targets.get(), where_targets)}}) {
    if (dims.empty()) {
      throw DataError(str(where, ": a scalar; expected one row per sample (N, ...)"));
    }
    if (dtype != "float32") {
      throw DataError(str(where, ": expected dtype float32 (regression inputs and targets), found ",
                          dtype, ": convert it, e.g. with h5py: f['",
                          where == where_inputs ? "inputs" : "targets",
                          "'] = x.astype('float32')"));
    }
  }
  const std::int64_t n = input_dims[0];
  if (target_dims[0] != n) {
    throw DataError(str(label, ": /targets holds ", target_dims[0], " rows but /inputs holds ", n,
                        " samples: every sample needs exactly one target row"));
  }
  if (n == 0) throw DataError(str(where_inputs, ": holds no samples"));
  require_sample_values(where_inputs, input_dims);
  require_sample_values(where_targets, target_dims);
  DatasetInfo info;
  info.path = path;
  info.kind = DatasetKind::kRegression;
  info.num_samples = n;
  info.sample_shape.assign(input_dims.begin() + 1, input_dims.end());
  info.target_shape.assign(target_dims.begin() + 1, target_dims.end());
  info.input_dtype = "float32";
  info.sample_bytes = 4 * (product(info.sample_shape) + product(info.target_shape));
  info.chunk_shape = h5::chunk_dims(inputs.get(), where_inputs);
  if (n < expect.min_samples) {
    throw DataError(str(label, ": holds ", n, " samples, fewer than one global batch of ",
                        expect.min_samples,
                        " (data.batch_size x data-parallel ranks): use a smaller data.batch_size, "
                        "fewer ranks, or a larger file"));
  }
  // Non-finite values would turn the loss into NaN at some step: refuse the file up front.
  const std::int64_t row = std::max<std::int64_t>(product(info.sample_shape), 1);
  const std::int64_t target_row = std::max<std::int64_t>(product(info.target_shape), 1);
  std::vector<float> block;
  for (const auto& [dataset, dims, width, where] :
       {std::tuple{inputs.get(), input_dims, row, where_inputs},
        std::tuple{targets.get(), target_dims, target_row, where_targets}}) {
    h5::Handle space(HPCTRAIN_H5(H5Dget_space(dataset), where), H5Sclose);
    const std::int64_t scan_end = options.trusted ? 0 : n;  // validated in this run already
    for (std::int64_t begin = 0; begin < scan_end; begin += kScanRows) {
      const std::int64_t count = std::min(kScanRows, n - begin);
      block.resize(static_cast<std::size_t>(count * width));
      read_runs(dataset, space.get(), dims, {{begin, count}}, H5T_NATIVE_FLOAT, block.data(),
                where);
      for (std::size_t i = 0; i < block.size(); ++i) {
        if (!std::isfinite(block[i])) {
          throw DataError(str(where, ": value ", block[i], " at sample ",
                              begin + static_cast<std::int64_t>(i) / width,
                              " is not finite: fix or drop that sample"));
        }
      }
    }
  }
  inputs.reset();
  h5::Handle cached = open_cached(file.get(), "inputs", 4, options, where_inputs, info);
  return std::make_unique<RegressionDataset>(std::move(file), std::move(cached), std::move(targets),
                                             std::move(info), label);
}

}  // namespace hpctrain::data::detail
