#include "hpctrain/data/inspect.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/data/hdf5_util.hpp"
#include "hpctrain/data/reader_memory.hpp"
#include "hpctrain/data/sampler.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

// Label histograms are shown for files up to this many samples (one int64 read of /labels).
constexpr std::int64_t kMaxHistogram = std::int64_t{1} << 24;
constexpr std::int64_t kMaxHistogramClasses = 1000;

std::string filters_of(hid_t dataset, const std::string& where) {
  h5::Handle plist(HPCTRAIN_H5(H5Dget_create_plist(dataset), where), H5Pclose);
  const int n = H5Pget_nfilters(plist.get());
  std::string out;
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t count = 0;
    char name[64] = {0};
    H5Pget_filter2(plist.get(), static_cast<unsigned>(i), &flags, &count, nullptr, sizeof name,
                   name, &config);
    out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

std::string escape_bytes(const torch::Tensor& tokens) {
  std::string out;
  auto t = tokens.contiguous();
  const auto* p = t.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const std::int64_t c = p[i];
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 32 && c < 127) {
      out += static_cast<char>(c);
    } else {
      std::ostringstream hex;
      hex << "\\x" << std::hex << std::setw(2) << std::setfill('0') << c;
      out += hex.str();
    }
  }
  return out;
}

void describe_objects(std::ostringstream& out, hid_t file, const std::string& label) {
  std::vector<std::string> names;
  hsize_t index = 0;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  HPCTRAIN_H5(H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names), label);
  out << "datasets\n";
  for (const std::string& name : names) {
    const std::string where = str(label, ", dataset /", name);
    // The object's kind from an open identifier: H5Oget_info_by_name changed its signature in
    // HDF5 1.12 (a fields argument), H5Oopen and H5Iget_type are the same in 1.10 and 1.14.
    H5I_type_t kind = H5I_BADID;
    {
      h5::Handle object(HPCTRAIN_H5(H5Oopen(file, name.c_str(), H5P_DEFAULT), where), H5Oclose);
      kind = H5Iget_type(object.get());
    }
    if (kind != H5I_DATASET) {
      out << "  /" << name << "  (" << (kind == H5I_GROUP ? "group" : "object") << ", not read)\n";
      continue;
    }
    h5::Handle dataset(HPCTRAIN_H5(H5Dopen2(file, name.c_str(), H5P_DEFAULT), where), H5Dclose);
    h5::Handle type(HPCTRAIN_H5(H5Dget_type(dataset.get()), where), H5Tclose);
    const auto chunks = h5::chunk_dims(dataset.get(), where);
    out << "  /" << std::left << std::setw(8) << name << " " << std::setw(8)
        << h5::type_name(type.get()) << " shape "
        << h5::shape_string(h5::dataset_dims(dataset.get(), where)) << "  chunks "
        << (chunks.empty() ? "none (contiguous)" : h5::shape_string(chunks)) << "  filters "
        << filters_of(dataset.get(), where) << "\n";
    for (const auto& [key, value] : h5::describe_attrs(dataset.get(), where)) {
      out << "      @" << key << " = " << value << "\n";
    }
  }
}

}  // namespace

std::string describe_data_file(const std::string& path, const InspectOptions& options) {
  DatasetExpectation expect;
  expect.seq_len = options.seq_len;
  std::unique_ptr<Dataset> dataset = Dataset::open(path, expect);
  const DatasetInfo& info = dataset->info();

  auto hold = lock_hdf5();
  h5::silence_errors();
  const std::string label = str("data file '", path, "'");
  h5::Handle file(HPCTRAIN_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), label), H5Fclose);
  struct stat st {};
  ::stat(path.c_str(), &st);

  std::ostringstream out;
  out << "file      " << path << " (" << format_bytes(static_cast<double>(st.st_size)) << ")\n";
  out << "kind      " << task_name(info.kind) << "\n";
  out << "attributes\n";
  for (const auto& [key, value] : h5::describe_attrs(file.get(), label)) {
    out << "  " << std::left << std::setw(15) << key << " " << value << "\n";
  }
  describe_objects(out, file.get(), label);

  // Memory before any sample is read: what training would take at the given batch (a shape
  // that declares samples beyond memory is refused here, exit 3, as `train` refuses it).
  const std::int64_t rows = std::max<std::int64_t>(1, options.batch_size);
  const TrainSampler sampler(info.num_samples,
                             std::min(rows, std::max<std::int64_t>(1, info.num_samples)), 0,
                             /*shuffle=*/true, default_sample_order(info.num_samples));
  const ReaderMemory reader = reader_memory(info, rows, options.prefetch);
  check_reader_memory(reader, static_cast<double>(sampler.memory_bytes()), "data", info);
  out << "memory    reader " << format_bytes(reader.total()) << " per rank at data.batch_size "
      << rows << " (" << reader.describe() << "); sampler "
      << format_bytes(static_cast<double>(sampler.memory_bytes())) << " per rank (order "
      << sample_order_name(sampler.order()) << ")\n";

  const std::int64_t shown = std::min<std::int64_t>(options.samples, info.num_samples);
  std::vector<std::int64_t> first(static_cast<std::size_t>(shown));
  for (std::int64_t i = 0; i < shown; ++i) first[static_cast<std::size_t>(i)] = i;
  if (info.kind == DatasetKind::kRegression) {
    out << "samples   " << info.num_samples << " x " << h5::shape_string(info.sample_shape)
        << " float32 inputs, targets " << h5::shape_string(info.target_shape) << " float32\n";
    Batch batch = dataset->read(first);
    out << "first " << shown
        << " samples\n  index  input min/max/mean            target min/max/mean\n";
    for (std::int64_t i = 0; i < shown; ++i) {
      auto x = batch.inputs[i];
      auto y = batch.targets[i];
      out << "  " << std::setw(6) << i << std::fixed << std::setprecision(4) << "  "
          << x.min().item<float>() << " " << x.max().item<float>() << " " << x.mean().item<float>()
          << "    " << y.min().item<float>() << " " << y.max().item<float>() << " "
          << y.mean().item<float>() << "\n"
          << std::defaultfloat;
    }
  } else if (info.kind == DatasetKind::kClassification) {
    out << "samples   " << info.num_samples << " x " << h5::shape_string(info.sample_shape) << " "
        << info.input_dtype << " (scale " << info.input_scale << "), " << info.num_classes
        << " classes\n";
    if (info.num_samples <= kMaxHistogram) {
      h5::Handle labels(HPCTRAIN_H5(H5Dopen2(file.get(), "labels", H5P_DEFAULT), label), H5Dclose);
      std::vector<std::int64_t> all(static_cast<std::size_t>(info.num_samples));
      HPCTRAIN_H5(
          H5Dread(labels.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()),
          label);
      // Counted by value, not in a vector of num_classes: the class count comes from the file.
      std::map<std::int64_t, std::int64_t> counts;
      for (auto v : all) ++counts[v];
      out << "labels    ";
      if (info.num_classes <= kMaxHistogramClasses) {
        for (std::int64_t c = 0; c < info.num_classes; ++c) {
          const auto it = counts.find(c);
          out << (c ? " " : "") << c << ":" << (it == counts.end() ? 0 : it->second);
        }
      } else {
        out << counts.size() << " distinct of " << info.num_classes << " classes (histogram "
            << "shown for up to " << kMaxHistogramClasses << " classes)";
      }
      out << "\n";
    }
    Batch batch = dataset->read(first);
    out << "first " << shown << " samples\n  index  label   min     max     mean\n";
    for (std::int64_t i = 0; i < shown; ++i) {
      auto x = batch.inputs[i];
      out << "  " << std::setw(6) << i << " " << std::setw(6)
          << batch.targets[i].item<std::int64_t>() << std::fixed << std::setprecision(4) << "  "
          << x.min().item<float>() << "  " << x.max().item<float>() << "  "
          << x.mean().item<float>() << "\n"
          << std::defaultfloat;
    }
  } else {
    out << "tokens    " << info.num_tokens << " " << info.input_dtype << ", vocab_size "
        << info.vocab_size << "\n";
    out << "samples   " << info.num_samples << " windows of seq_len " << info.seq_len
        << " (+1 target token; --seq-len sets it)\n";
    h5::Handle tokens(HPCTRAIN_H5(H5Dopen2(file.get(), "tokens", H5P_DEFAULT), label), H5Dclose);
    const bool bytes =
        h5::read_string_attr(tokens.get(), "tokenizer", label).value_or("") == "bytes";
    Batch batch = dataset->read(first);
    out << "first " << shown << " samples (input tokens" << (bytes ? " as text" : "") << ")\n";
    const std::int64_t width = std::min<std::int64_t>(info.seq_len, bytes ? 48 : 16);
    for (std::int64_t i = 0; i < shown; ++i) {
      auto window = batch.inputs[i].slice(0, 0, width);
      out << "  " << std::setw(6) << i << "  ";
      if (bytes) {
        out << "\"" << escape_bytes(window) << (info.seq_len > width ? "..." : "") << "\"\n";
      } else {
        for (std::int64_t t = 0; t < width; ++t) out << window[t].item<std::int64_t>() << " ";
        out << (info.seq_len > width ? "..." : "") << "\n";
      }
    }
  }
  out << "valid     yes (checked as training would: dtypes, shapes, "
      << (info.kind == DatasetKind::kClassification ? "label range"
          : info.kind == DatasetKind::kRegression   ? "finite values"
                                                    : "token range")
      << ")\n";
  return out.str();
}

}  // namespace hpctrain::data
