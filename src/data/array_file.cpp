// Headers of the array files `hpctrain prepare numpy | tokens` reads: .npy (NumPy's format,
// versions 1-3), llm.c's .bin token files (a header of 256 little-endian int32: magic 20240520,
// version 1 for uint16 or 2 for uint32 tokens, token count) and raw little-endian arrays. Every
// check names the byte offset where the file breaks the format and what was expected there.

#include "hpctrain/data/array_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

constexpr std::int32_t kLlmcMagic = 20240520;
constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

struct Dtype {
  const char* descr;  // NumPy's little-endian spelling
  const char* name;
  int bytes;
  bool integer;
  bool is_signed;
};
constexpr Dtype kDtypes[] = {
    {"|u1", "uint8", 1, true, false},   {"|i1", "int8", 1, true, true},
    {"<u2", "uint16", 2, true, false},  {"<i2", "int16", 2, true, true},
    {"<u4", "uint32", 4, true, false},  {"<i4", "int32", 4, true, true},
    {"<u8", "uint64", 8, true, false},  {"<i8", "int64", 8, true, true},
    {"<f4", "float32", 4, false, true}, {"<f8", "float64", 8, false, true},
};

const Dtype* dtype_by_descr(const std::string& descr) {
  std::string d = descr;
  if (d.size() == 3 && d[0] == '=') d[0] = '<';  // native = little-endian on every platform here
  if (d.size() == 3 && (d[1] == 'u' || d[1] == 'i') && d[2] == '1') d[0] = '|';
  for (const auto& t : kDtypes) {
    if (d == t.descr) return &t;
  }
  return nullptr;
}

const Dtype* dtype_by_name(const std::string& name) {
  for (const auto& t : kDtypes) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

std::int64_t file_size(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw DataError(str(what, " '", path, "' does not exist: check the path"));
  }
  if (!S_ISREG(st.st_mode)) {
    throw DataError(str(what, " '", path, "' is not a regular file: pass array files only"));
  }
  return static_cast<std::int64_t>(st.st_size);
}

std::string read_bytes(const std::string& path, std::int64_t offset, std::int64_t count) {
  std::string out(static_cast<std::size_t>(count), '\0');
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw DataError(str("'", path, "' cannot be opened: ", std::strerror(errno)));
  const ssize_t got = ::pread(fd, out.data(), static_cast<std::size_t>(count), offset);
  ::close(fd);
  out.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return out;
}

// The value of 'key' in NumPy's header dict text ("{'descr': '<u2', 'fortran_order': False,
// 'shape': (3, 4), }"), as written; empty when absent.
std::string dict_value(const std::string& header, const std::string& key) {
  const std::size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return {};
  std::size_t i = header.find(':', at);
  if (i == std::string::npos) return {};
  ++i;
  while (i < header.size() && header[i] == ' ') ++i;
  if (i >= header.size()) return {};
  if (header[i] == '\'') {
    const std::size_t end = header.find('\'', i + 1);
    return end == std::string::npos ? std::string() : header.substr(i + 1, end - i - 1);
  }
  if (header[i] == '(') {
    const std::size_t end = header.find(')', i);
    return end == std::string::npos ? std::string() : header.substr(i, end - i + 1);
  }
  const std::size_t end = header.find_first_of(",}", i);
  return header.substr(i, end == std::string::npos ? std::string::npos : end - i);
}

void check_length(ArrayFile& a, std::int64_t size) {
  std::int64_t elements = 1;
  for (auto d : a.shape) elements *= d;
  a.count = elements;
  const std::int64_t need = a.data_offset + elements * a.element_bytes;
  if (size < need) {
    const std::int64_t whole = (size - a.data_offset) / a.element_bytes;
    throw DataError(str(a.what, " '", a.path, "' is truncated: its header promises ", elements, " ",
                        a.dtype, " values (", elements * a.element_bytes,
                        " bytes from byte offset ", a.data_offset, ", so ", need,
                        " bytes), the file ends at byte offset ", size, " (value ",
                        std::max<std::int64_t>(whole, 0), " would start at byte offset ",
                        a.data_offset + std::max<std::int64_t>(whole, 0) * a.element_bytes,
                        "): write the file again, completely"));
  }
  if (size > need && a.format != "npy") {
    throw DataError(str(a.what, " '", a.path, "': ", size - need,
                        " bytes follow the last value at byte offset ", need,
                        ": the header's token count does not match the file"));
  }
}

// --format auto takes a file without a known magic number as a raw array. An llm.c file whose
// magic number is damaged must not become tokens that way (its 1024 header bytes would be read
// as 512 tokens, as llm.c's own loader refuses it): a header whose version and token count
// describe the file's size exactly is llm.c's layout, and its wrong magic number is an error.
void refuse_damaged_llmc(const std::string& path, const std::string& what) {
  const std::int64_t size = file_size(path, what);
  if (size < kLlmcHeaderBytes) return;
  const std::string head = read_bytes(path, 0, 12);
  if (head.size() < 12) return;
  std::int32_t header[3];
  std::memcpy(header, head.data(), sizeof header);
  if (header[1] != 1 && header[1] != 2) return;
  const std::int64_t bytes = header[1] == 1 ? 2 : 4;
  if (header[2] < 0 || kLlmcHeaderBytes + header[2] * bytes != size) return;
  throw DataError(str(what, " '", path, "': byte offset 0 holds ", header[0],
                      ", expected llm.c's magic number ", kLlmcMagic,
                      ", but byte offsets 4 and 8 (", "version ", header[1], ", ", header[2],
                      " tokens) describe an llm.c .bin file of exactly this size: its header is "
                      "damaged; write the file again (for a raw array use --format raw)"));
}

}  // namespace

ArrayFile open_npy(const std::string& path, const std::string& what) {
  const std::int64_t size = file_size(path, what);
  ArrayFile a;
  a.path = path;
  a.what = what;
  a.format = "npy";
  const std::string head = read_bytes(path, 0, 12);
  if (head.size() < 10 || head.compare(0, 6, "\x93NUMPY") != 0) {
    throw DataError(str(what, " '", path,
                        "' is not a .npy file: byte offset 0 should hold the magic \\x93NUMPY "
                        "(numpy.save writes it), the file starts otherwise"));
  }
  const int major = static_cast<unsigned char>(head[6]);
  std::int64_t header_len = 0;
  std::int64_t header_at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(head[8]) | (static_cast<unsigned char>(head[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (head.size() < 12) throw DataError(str(what, " '", path, "' is truncated in its header"));
    for (int b = 3; b >= 0; --b) {
      header_len = (header_len << 8) | static_cast<unsigned char>(head[8 + b]);
    }
    header_at = 12;
  } else {
    throw DataError(str(what, " '", path, "': byte offset 6 holds format version ", major,
                        ", expected 1, 2 or 3 (numpy.save)"));
  }
  if (header_at + header_len > size) {
    throw DataError(str(what, " '", path, "' is truncated: its header of ", header_len,
                        " bytes from byte offset ", header_at, " runs past the end (", size,
                        " bytes)"));
  }
  const std::string header = read_bytes(path, header_at, header_len);
  a.data_offset = header_at + header_len;
  const std::string descr = dict_value(header, "descr");
  const Dtype* t = dtype_by_descr(descr);
  if (t == nullptr) {
    throw DataError(str(what, " '", path, "': the header at byte offset ", header_at,
                        " gives descr '", descr,
                        "', expected a little-endian number type (<u2, <i4, <f4, |u1, ...): "
                        "convert with numpy's astype before saving"));
  }
  a.dtype = t->name;
  a.element_bytes = t->bytes;
  if (dict_value(header, "fortran_order") == "True") {
    throw DataError(str(what, " '", path, "': the header at byte offset ", header_at,
                        " says fortran_order True: save a C-ordered array "
                        "(numpy.ascontiguousarray)"));
  }
  const std::string shape = dict_value(header, "shape");
  if (shape.size() < 2 || shape.front() != '(') {
    throw DataError(str(what, " '", path, "': no shape in the header at byte offset ", header_at));
  }
  std::string digits;
  for (std::size_t i = 1; i < shape.size(); ++i) {
    const char c = shape[i];
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (!digits.empty()) {
      a.shape.push_back(std::stoll(digits));
      digits.clear();
    }
  }
  check_length(a, size);
  return a;
}

ArrayFile open_token_file(const std::string& path, const std::string& format,
                          const std::string& raw_dtype) {
  const std::string what = "token file";
  // Checked before anything opens it: open(2) of a FIFO blocks until a writer appears.
  file_size(path, what);
  std::string kind = format;
  if (kind == "auto") {
    const std::string head = read_bytes(path, 0, 6);
    std::int32_t magic = 0;
    if (head.size() >= 4) std::memcpy(&magic, head.data(), 4);
    kind = head.compare(0, 6, "\x93NUMPY") == 0 ? "npy" : magic == kLlmcMagic ? "llmc" : "raw";
    if (kind == "raw") refuse_damaged_llmc(path, what);
  }
  ArrayFile a;
  if (kind == "npy") {
    a = open_npy(path, what);
  } else if (kind == "llmc") {
    const std::int64_t size = file_size(path, what);
    a.path = path;
    a.what = what;
    a.format = "llmc";
    const std::string head = read_bytes(path, 0, kLlmcHeaderBytes);
    if (static_cast<std::int64_t>(head.size()) < kLlmcHeaderBytes) {
      throw DataError(str(what, " '", path,
                          "' is truncated: an llm.c token file starts with a "
                          "header of 256 int32 (1024 bytes), the file ends at byte offset ",
                          size));
    }
    std::int32_t header[3];
    std::memcpy(header, head.data(), sizeof header);
    if (header[0] != kLlmcMagic) {
      throw DataError(str(what, " '", path, "': byte offset 0 holds ", header[0],
                          ", expected llm.c's magic number ", kLlmcMagic,
                          ": not an llm.c .bin file (for a raw array use --format raw)"));
    }
    if (header[1] != 1 && header[1] != 2) {
      throw DataError(str(what, " '", path, "': byte offset 4 holds version ", header[1],
                          ", expected 1 (uint16 tokens) or 2 (uint32 tokens)"));
    }
    a.dtype = header[1] == 1 ? "uint16" : "uint32";
    a.element_bytes = header[1] == 1 ? 2 : 4;
    if (header[2] < 0) {
      throw DataError(str(what, " '", path, "': byte offset 8 holds a token count of ", header[2],
                          ", expected a count >= 0"));
    }
    if (!raw_dtype.empty() && raw_dtype != a.dtype) {
      throw DataError(str(what, " '", path, "': byte offset 4 holds version ", header[1], " (",
                          a.dtype, " tokens), but --dtype says ", raw_dtype,
                          ": leave --dtype out for llm.c files"));
    }
    a.data_offset = kLlmcHeaderBytes;
    a.shape = {header[2]};
    check_length(a, size);
  } else if (kind == "raw") {
    const std::int64_t size = file_size(path, what);
    const std::string dtype = raw_dtype.empty() ? std::string("uint16") : raw_dtype;
    const Dtype* t = dtype_by_name(dtype);
    if (t == nullptr || !t->integer) {
      throw ConfigError(str("--dtype ", dtype, ": token files hold uint16, uint32 or int32"));
    }
    a.path = path;
    a.what = what;
    a.format = "raw";
    a.dtype = t->name;
    a.element_bytes = t->bytes;
    if (size % t->bytes != 0) {
      throw DataError(str(what, " '", path, "' is truncated: ", size,
                          " bytes is not a whole number of ", dtype, " tokens (", t->bytes,
                          " bytes each): the last token, at byte offset ", size - size % t->bytes,
                          ", is cut short; check --dtype"));
    }
    a.shape = {size / t->bytes};
    a.count = size / t->bytes;
  } else {
    throw ConfigError(str("--format ", format, ": expected auto, npy, llmc or raw"));
  }
  const Dtype* t = dtype_by_name(a.dtype);
  if (t == nullptr || !t->integer) {
    throw DataError(str(what, " '", path, "': the header at byte offset 8 gives dtype ", a.dtype,
                        ", expected integer token ids (uint16, uint32, int32 or int64): "
                        "convert with numpy's astype"));
  }
  if (a.shape.size() != 1) {
    throw DataError(str(what, " '", path, "': shape has ", a.shape.size(),
                        " dimensions, expected one token stream (1-D)"));
  }
  return a;
}

void read_as_int64(const ArrayFile& a, std::int64_t first, std::int64_t count, std::int64_t* out) {
  const Dtype* t = dtype_by_name(a.dtype);
  std::vector<unsigned char> raw(static_cast<std::size_t>(count * a.element_bytes));
  const int fd = ::open(a.path.c_str(), O_RDONLY);
  if (fd < 0) throw DataError(str("'", a.path, "' cannot be opened: ", std::strerror(errno)));
  std::size_t done = 0;
  while (done < raw.size()) {
    const ssize_t got = ::pread(fd, raw.data() + done, raw.size() - done,
                                a.data_offset + first * a.element_bytes + static_cast<off_t>(done));
    if (got <= 0) {
      ::close(fd);
      throw DataError(str(a.what, " '", a.path, "' ended at byte offset ",
                          a.data_offset + first * a.element_bytes + static_cast<off_t>(done),
                          " while reading: it shrank during the conversion"));
    }
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  for (std::int64_t i = 0; i < count; ++i) {
    const unsigned char* p = raw.data() + i * a.element_bytes;
    std::uint64_t u = 0;
    for (int b = t->bytes - 1; b >= 0; --b) u = (u << 8) | p[b];
    std::int64_t v = static_cast<std::int64_t>(u);
    if (t->is_signed && t->bytes < 8 && (u >> (8 * t->bytes - 1)) != 0) {
      v = static_cast<std::int64_t>(u | (~std::uint64_t{0} << (8 * t->bytes)));
    }
    if (!t->is_signed && t->bytes == 8 && static_cast<std::int64_t>(u) < 0) v = -1;  // beyond int64
    out[i] = v;
  }
}

void read_as_float(const ArrayFile& a, std::int64_t first, std::int64_t count, float* out) {
  std::vector<unsigned char> raw(static_cast<std::size_t>(count * a.element_bytes));
  const int fd = ::open(a.path.c_str(), O_RDONLY);
  if (fd < 0) throw DataError(str("'", a.path, "' cannot be opened: ", std::strerror(errno)));
  const ssize_t got = ::pread(fd, raw.data(), raw.size(), a.data_offset + first * a.element_bytes);
  ::close(fd);
  if (got != static_cast<ssize_t>(raw.size())) {
    throw DataError(str(a.what, " '", a.path, "' ended while reading: it shrank"));
  }
  for (std::int64_t i = 0; i < count; ++i) {
    const unsigned char* p = raw.data() + i * a.element_bytes;
    if (a.dtype == "float32") {
      std::memcpy(out + i, p, 4);
    } else if (a.dtype == "float64") {
      double d;
      std::memcpy(&d, p, 8);
      out[i] = static_cast<float>(d);
    } else if (a.dtype == "uint8") {
      out[i] = static_cast<float>(p[0]);
    } else {
      throw DataError(
          str(a.what, " '", a.path, "': dtype ", a.dtype, " cannot be read as float32 values"));
    }
  }
}

}  // namespace hpctrain::data
