#include "slab_io.hpp"

#include <functional>

#include "file_io.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"

namespace hpctrain::checkpoint::slab {
namespace {

// Calls `run(file_offset, memory_offset, bytes)` for each maximal contiguous piece of the slab.
void for_each_run(const Geometry& g,
                  const std::function<void(std::uint64_t, std::uint64_t, std::uint64_t)>& run) {
  if (g.empty()) return;
  const auto row = static_cast<std::uint64_t>(g.inner * g.element_size);
  const auto bytes = static_cast<std::uint64_t>(g.end - g.begin) * row;
  std::uint64_t file_start = 0, mem_start = 0, length = 0;
  for (std::int64_t o = 0; o < g.outer; ++o) {
    const std::uint64_t file = (static_cast<std::uint64_t>(o * g.logical + g.begin)) * row;
    const std::uint64_t mem = static_cast<std::uint64_t>(o * g.local) * row;
    if (length > 0 && file == file_start + length && mem == mem_start + length) {
      length += bytes;
      continue;
    }
    if (length > 0) run(file_start, mem_start, length);
    file_start = file;
    mem_start = mem;
    length = bytes;
  }
  if (length > 0) run(file_start, mem_start, length);
}

}  // namespace

Geometry geometry(const std::vector<std::int64_t>& logical_shape, int split_dim,
                  std::int64_t local_extent, int tp_rank, std::int64_t element_size) {
  Geometry g;
  g.element_size = element_size;
  if (split_dim < 0) {
    std::int64_t numel = 1;
    for (auto d : logical_shape) numel *= d;
    g.logical = g.local = g.end = numel;
    return g;
  }
  g.split_dim = split_dim;
  g.logical = logical_shape[split_dim];
  g.local = local_extent;
  const auto [begin, end] = parallel::shard_range(g.logical, local_extent, tp_rank);
  g.begin = begin;
  g.end = end;
  for (int d = 0; d < split_dim; ++d) g.outer *= logical_shape[d];
  for (std::size_t d = split_dim + 1; d < logical_shape.size(); ++d) g.inner *= logical_shape[d];
  return g;
}

void write_slab(int fd, const std::string& path, std::uint64_t offset, const torch::Tensor& local,
                const Geometry& g) {
  const char* base = static_cast<const char*>(local.data_ptr());
  for_each_run(g, [&](std::uint64_t file, std::uint64_t mem, std::uint64_t bytes) {
    io::write_at(fd, base + mem, bytes, static_cast<off_t>(offset + file), path);
  });
}

void read_slab(int fd, const std::string& path, std::uint64_t offset, torch::Tensor& out,
               const Geometry& g) {
  char* base = static_cast<char*>(out.data_ptr());
  for_each_run(g, [&](std::uint64_t file, std::uint64_t mem, std::uint64_t bytes) {
    io::read_at(fd, base + mem, bytes, static_cast<off_t>(offset + file), path);
  });
  if (g.split_dim >= 0 && g.end - g.begin < g.local) {
    const std::int64_t valid = std::max<std::int64_t>(0, g.end - g.begin);
    out.narrow(g.split_dim, valid, g.local - valid).zero_();
  }
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace hpctrain::checkpoint::slab
