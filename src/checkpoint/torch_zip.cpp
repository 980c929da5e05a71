// A torch.save archive's state_dict, read with a value-only pickle machine (torch_zip.hpp says why
// LibTorch's unpickler does not do). The machine knows the opcodes of pickle protocols 2 to 5
// in their binary forms, which is what torch.save writes (protocol 2 by default).

#include "torch_zip.hpp"

#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <map>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::checkpoint::torchzip {
namespace {

struct Value;
using Ptr = std::shared_ptr<Value>;

// A Python value as far as a state_dict needs one.
struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kBytes,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kOpaque
  };
  Kind kind = Kind::kNone;
  std::int64_t i = 0;  // bool, int; storage: numel
  double f = 0;
  std::string s;           // str, bytes, global "module.name", opaque: its class, storage: key
  std::vector<Ptr> items;  // tuple, list
  std::vector<std::pair<Ptr, Ptr>> entries;  // dict
  torch::ScalarType dtype = torch::kFloat;   // storage, tensor
  Ptr storage;                               // tensor
  std::int64_t offset = 0;                   // tensor: storage offset
  std::vector<std::int64_t> shape, stride;   // tensor
};

Ptr make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

// torch.<Name>Storage -> its element type.
const std::map<std::string, torch::ScalarType>& storage_types() {
  static const std::map<std::string, torch::ScalarType> types{
      {"torch.DoubleStorage", torch::kDouble},
      {"torch.FloatStorage", torch::kFloat},
      {"torch.HalfStorage", torch::kHalf},
      {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kLong},
      {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},
      {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},
      {"torch.BoolStorage", torch::kBool},
      {"torch.ComplexFloatStorage", torch::kComplexFloat},
      {"torch.ComplexDoubleStorage", torch::kComplexDouble},
      {"torch.UntypedStorage", torch::kByte}};
  return types;
}

class Machine {
 public:
  Machine(const std::string& path, const char* data, std::size_t size)
      : path_(path), p_(data), size_(size) {}

  Ptr run() {
    while (true) {
      const std::size_t at = pos_;
      const auto op = static_cast<unsigned char>(byte());
      switch (op) {
        case 0x80: byte(); break;    // PROTO
        case 0x95: bytes(8); break;  // FRAME
        case '.': return pop(at);    // STOP
        case '(': marks_.push_back(stack_.size()); break;
        case '0': pop(at); break;        // POP
        case '1': pop_mark(at); break;   // POP_MARK
        case '2': push(top(at)); break;  // DUP
        case 'N': push(make(Value::Kind::kNone)); break;
        case 0x88: push(boolean(true)); break;
        case 0x89: push(boolean(false)); break;
        case 'J': push(integer(signed_le(4))); break;
        case 'K': push(integer(static_cast<std::int64_t>(unsigned_le(1)))); break;
        case 'M': push(integer(static_cast<std::int64_t>(unsigned_le(2)))); break;
        case 0x8a: push(integer(long_int(unsigned_le(1)))); break;
        case 0x8b: push(integer(long_int(unsigned_le(4)))); break;
        case 'G': push(binfloat()); break;
        case 'X': push(text(Value::Kind::kStr, unsigned_le(4))); break;
        case 0x8c: push(text(Value::Kind::kStr, unsigned_le(1))); break;
        case 0x8d: push(text(Value::Kind::kStr, unsigned_le(8))); break;
        case 'T': push(text(Value::Kind::kStr, unsigned_le(4))); break;  // BINSTRING
        case 'U': push(text(Value::Kind::kStr, unsigned_le(1))); break;  // SHORT_BINSTRING
        case 'B': push(text(Value::Kind::kBytes, unsigned_le(4))); break;
        case 'C': push(text(Value::Kind::kBytes, unsigned_le(1))); break;
        case 0x8e: push(text(Value::Kind::kBytes, unsigned_le(8))); break;
        case 0x96: push(text(Value::Kind::kBytes, unsigned_le(8))); break;  // BYTEARRAY8
        case ')': push(make(Value::Kind::kTuple)); break;
        case 't': push(sequence(Value::Kind::kTuple, pop_mark(at))); break;
        case 0x85: push(tuple_of(1, at)); break;
        case 0x86: push(tuple_of(2, at)); break;
        case 0x87: push(tuple_of(3, at)); break;
        case ']': push(make(Value::Kind::kList)); break;
        case 'l': push(sequence(Value::Kind::kList, pop_mark(at))); break;
        case 0x8f: push(make(Value::Kind::kList)); break;  // EMPTY_SET: a list will do
        case 0x91: push(sequence(Value::Kind::kList, pop_mark(at))); break;  // FROZENSET
        case 'a': {
          Ptr item = pop(at);
          append(top(at), {item}, at);
          break;
        }
        case 'e':
        case 0x90: {  // APPENDS, ADDITEMS
          std::vector<Ptr> items = pop_mark(at);
          append(top(at), items, at);
          break;
        }
        case '}': push(make(Value::Kind::kDict)); break;
        case 'd': {
          Ptr dict = make(Value::Kind::kDict);
          set_items(dict, pop_mark(at), at);
          push(dict);
          break;
        }
        case 's': {
          Ptr value = pop(at);
          Ptr key = pop(at);
          set_items(top(at), {key, value}, at);
          break;
        }
        case 'u': {
          std::vector<Ptr> items = pop_mark(at);
          set_items(top(at), items, at);
          break;
        }
        case 'c': {
          std::string module = line(at);
          std::string name = line(at);
          push(global(module + "." + name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Ptr name = pop(at);
          Ptr module = pop(at);
          if (name->kind != Value::Kind::kStr || module->kind != Value::Kind::kStr) {
            fail(at, "STACK_GLOBAL without two strings");
          }
          push(global(module->s + "." + name->s));
          break;
        }
        case 'R': {
          Ptr args = pop(at);
          Ptr callable = pop(at);
          push(reduce(callable, args, at));
          break;
        }
        case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
          pop(at);
          Ptr cls = pop(at);
          push(opaque(cls));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          pop(at);
          pop(at);
          Ptr cls = pop(at);
          push(opaque(cls));
          break;
        }
        case 'b': pop(at); break;  // BUILD: state is dropped (an OrderedDict's _metadata, ...)
        case 'Q': push(persistent(pop(at), at)); break;
        case 'q': memo_[unsigned_le(1)] = top(at); break;
        case 'r': memo_[unsigned_le(4)] = top(at); break;
        case 0x94: memo_[memo_.size()] = top(at); break;  // MEMOIZE
        case 'h': push(memo(unsigned_le(1), at)); break;
        case 'j': push(memo(unsigned_le(4), at)); break;
        default:
          fail(at, str("unsupported pickle opcode 0x", hex(op),
                       " (hpctrain reads the binary pickle protocols 2-5 torch.save writes)"));
      }
    }
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& why) const {
    throw CheckpointError(str("torch.save file '", path_, "': data.pkl byte ", at, ": ", why,
                              ": the file is damaged, or not a state_dict saved by torch.save"));
  }
  static std::string hex(unsigned v) {
    const char* d = "0123456789abcdef";
    return str(d[(v >> 4) & 15], d[v & 15]);
  }
  char byte() {
    if (pos_ >= size_) fail(pos_, "the pickle ends before its STOP opcode");
    return p_[pos_++];
  }
  const char* bytes(std::uint64_t n) {
    if (n > size_ - pos_) fail(pos_, str("a field of ", n, " bytes runs past the pickle's end"));
    const char* out = p_ + pos_;
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  std::uint64_t unsigned_le(int n) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes(static_cast<std::uint64_t>(n)));
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[i];
    return v;
  }
  std::int64_t signed_le(int n) {
    const std::uint64_t v = unsigned_le(n);
    const std::uint64_t sign = 1ull << (8 * n - 1);
    return static_cast<std::int64_t>((v ^ sign) - sign);
  }
  std::int64_t long_int(std::uint64_t n) {
    if (n == 0) return 0;
    if (n > 8) {
      bytes(n);
      return 0;  // wider than 64 bits: no state_dict field needs its value
    }
    return signed_le(static_cast<int>(n));
  }
  Ptr binfloat() {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes(8));
    std::uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | b[i];  // big-endian
    Ptr v = make(Value::Kind::kFloat);
    std::memcpy(&v->f, &bits, 8);
    return v;
  }
  Ptr text(Value::Kind kind, std::uint64_t n) {
    Ptr v = make(kind);
    const char* b = bytes(n);
    v->s.assign(b, static_cast<std::size_t>(n));
    return v;
  }
  std::string line(std::size_t at) {
    std::string out;
    while (true) {
      const char c = byte();
      if (c == '\n') return out;
      out += c;
      if (out.size() > 512) fail(at, "a GLOBAL name longer than 512 bytes");
    }
  }
  static Ptr boolean(bool b) {
    Ptr v = make(Value::Kind::kBool);
    v->i = b ? 1 : 0;
    return v;
  }
  static Ptr integer(std::int64_t i) {
    Ptr v = make(Value::Kind::kInt);
    v->i = i;
    return v;
  }
  static Ptr global(const std::string& name) {
    Ptr v = make(Value::Kind::kGlobal);
    v->s = name;
    return v;
  }
  static Ptr opaque(const Ptr& cls) {
    Ptr v = make(Value::Kind::kOpaque);
    v->s = cls->kind == Value::Kind::kGlobal ? cls->s : std::string("?");
    return v;
  }
  void push(Ptr v) { stack_.push_back(std::move(v)); }
  Ptr pop(std::size_t at) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      fail(at, "the pickle pops from an empty stack");
    }
    Ptr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const Ptr& top(std::size_t at) {
    if (stack_.empty()) fail(at, "the pickle reads an empty stack");
    return stack_.back();
  }
  std::vector<Ptr> pop_mark(std::size_t at) {
    if (marks_.empty()) fail(at, "the pickle closes a MARK it never opened");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ptr> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  static Ptr sequence(Value::Kind kind, std::vector<Ptr> items) {
    Ptr v = make(kind);
    v->items = std::move(items);
    return v;
  }
  Ptr tuple_of(int n, std::size_t at) {
    std::vector<Ptr> items(static_cast<std::size_t>(n));
    for (int i = n - 1; i >= 0; --i) items[static_cast<std::size_t>(i)] = pop(at);
    return sequence(Value::Kind::kTuple, std::move(items));
  }
  void append(const Ptr& list, const std::vector<Ptr>& items, std::size_t at) {
    if (list->kind == Value::Kind::kOpaque) return;  // a set or a list subclass: not needed
    if (list->kind != Value::Kind::kList) fail(at, "APPEND to something that is not a list");
    list->items.insert(list->items.end(), items.begin(), items.end());
  }
  void set_items(const Ptr& dict, const std::vector<Ptr>& items, std::size_t at) {
    if (items.size() % 2 != 0) fail(at, "SETITEMS with an odd number of values");
    if (dict->kind == Value::Kind::kOpaque) return;
    if (dict->kind != Value::Kind::kDict) fail(at, "SETITEM on something that is not a dict");
    for (std::size_t k = 0; k < items.size(); k += 2) {
      dict->entries.emplace_back(items[k], items[k + 1]);
    }
  }
  Ptr memo(std::uint64_t key, std::size_t at) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail(at, str("memo key ", key, " was never stored"));
    return it->second;
  }
  std::vector<std::int64_t> ints(const Ptr& v, const char* what, std::size_t at) {
    if (v->kind != Value::Kind::kTuple && v->kind != Value::Kind::kList) {
      fail(at, str("a tensor's ", what, " is not a tuple"));
    }
    std::vector<std::int64_t> out;
    for (const Ptr& x : v->items) {
      if (x->kind != Value::Kind::kInt) fail(at, str("a tensor's ", what, " holds a non-integer"));
      out.push_back(x->i);
    }
    return out;
  }
  Ptr persistent(const Ptr& pid, std::size_t at) {
    // ('storage', torch.FloatStorage, key, location, numel)
    if (pid->kind != Value::Kind::kTuple || pid->items.size() < 5 ||
        pid->items[0]->kind != Value::Kind::kStr || pid->items[0]->s != "storage") {
      fail(at, "a persistent id that is not ('storage', type, key, location, size)");
    }
    const Ptr& type = pid->items[1];
    const Ptr& key = pid->items[2];
    const Ptr& numel = pid->items[4];
    if (type->kind != Value::Kind::kGlobal || key->kind != Value::Kind::kStr ||
        numel->kind != Value::Kind::kInt) {
      fail(at, "a storage persistent id with fields of the wrong types");
    }
    auto it = storage_types().find(type->s);
    if (it == storage_types().end()) fail(at, str("unknown storage type ", type->s));
    Ptr v = make(Value::Kind::kStorage);
    v->dtype = it->second;
    v->s = key->s;
    v->i = numel->i;
    return v;
  }
  Ptr reduce(const Ptr& callable, const Ptr& args, std::size_t at) {
    if (callable->kind != Value::Kind::kGlobal) return opaque(callable);
    const std::string& name = callable->s;
    if (name == "collections.OrderedDict" || name == "builtins.dict") {
      Ptr dict = make(Value::Kind::kDict);
      return dict;  // its items follow as SETITEMS
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      if (args->kind != Value::Kind::kTuple || args->items.size() < 4 ||
          args->items[0]->kind != Value::Kind::kStorage ||
          args->items[1]->kind != Value::Kind::kInt) {
        fail(at, str(name, " called with arguments that are not (storage, offset, size, stride)"));
      }
      Ptr t = make(Value::Kind::kTensor);
      t->storage = args->items[0];
      t->dtype = t->storage->dtype;
      t->offset = args->items[1]->i;
      t->shape = ints(args->items[2], "size", at);
      t->stride = ints(args->items[3], "stride", at);
      if (t->shape.size() != t->stride.size())
        fail(at, "a tensor's size and stride differ in rank");
      return t;
    }
    if (name == "torch._utils._rebuild_parameter" ||
        name == "torch._utils._rebuild_parameter_with_state") {
      if (args->kind != Value::Kind::kTuple || args->items.empty() ||
          args->items[0]->kind != Value::Kind::kTensor) {
        fail(at, str(name, " called without a tensor"));
      }
      return args->items[0];
    }
    return opaque(callable);
  }

  std::string path_;
  const char* p_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::vector<Ptr> stack_;
  std::vector<std::size_t> marks_;
  std::map<std::uint64_t, Ptr> memo_;
};

// The dict's string-keyed tensors; `skipped` collects its other string keys.
std::vector<Entry> tensors_of(const Value& dict, std::vector<std::string>* skipped) {
  std::vector<Entry> out;
  for (const auto& [key, value] : dict.entries) {
    if (key->kind != Value::Kind::kStr) continue;
    if (value->kind != Value::Kind::kTensor) {
      if (skipped) skipped->push_back(key->s);
      continue;
    }
    Entry e;
    e.name = key->s;
    e.dtype = value->dtype;
    e.shape = value->shape;
    e.stride = value->stride;
    e.storage_offset = value->offset;
    e.storage_key = value->storage->s;
    e.storage_numel = value->storage->i;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

struct TorchZipFile::Impl {
  std::string path;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::vector<Entry> entries;
  std::string location;
  std::vector<std::string> skipped;
};

TorchZipFile TorchZipFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  at::DataPtr pickle;
  std::size_t pickle_size = 0;
  try {
    impl->reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (impl->reader->hasRecord("byteorder")) {
      auto [order, n] = impl->reader->getRecord("byteorder");
      const std::string text(static_cast<const char*>(order.get()), n);
      if (text != "little") {
        throw CheckpointError(str("torch.save file '", path, "' was written ", text,
                                  "-endian: save it on a little-endian machine"));
      }
    }
    if (!impl->reader->hasRecord("data.pkl")) {
      throw CheckpointError(str("torch.save file '", path,
                                "' is a zip archive without data.pkl: it is a TorchScript module "
                                "or another archive, not torch.save(state_dict)"));
    }
    std::tie(pickle, pickle_size) = impl->reader->getRecord("data.pkl");
  } catch (const c10::Error& e) {
    throw CheckpointError(str("torch.save file '", path, "' is not a readable zip archive (",
                              clip(e.what_without_backtrace(), 160),
                              "): the file is truncated or damaged; save it again"));
  }
  Machine machine(path, static_cast<const char*>(pickle.get()), pickle_size);
  const Ptr root = machine.run();
  if (root->kind != Value::Kind::kDict) {
    throw CheckpointError(str("torch.save file '", path,
                              "' holds no dict of tensors by name: save model.state_dict()"));
  }
  impl->entries = tensors_of(*root, &impl->skipped);
  if (impl->entries.empty()) {
    // A training checkpoint: the state_dict under a well-known key.
    for (const char* key : {"state_dict", "model", "model_state_dict", "module"}) {
      for (const auto& [k, v] : root->entries) {
        if (k->kind == Value::Kind::kStr && k->s == key && v->kind == Value::Kind::kDict) {
          impl->skipped.clear();
          impl->entries = tensors_of(*v, &impl->skipped);
          if (!impl->entries.empty()) impl->location = str("under key '", key, "'");
        }
      }
      if (!impl->entries.empty()) break;
    }
  }
  if (impl->entries.empty()) {
    throw CheckpointError(str("torch.save file '", path,
                              "' holds no tensors by name (at the top level, or under state_dict, "
                              "model, model_state_dict or module): save model.state_dict()"));
  }
  TorchZipFile file;
  file.impl_ = std::move(impl);
  return file;
}

const std::vector<Entry>& TorchZipFile::entries() const {
  return impl_->entries;
}
const std::string& TorchZipFile::location() const {
  return impl_->location;
}
const std::vector<std::string>& TorchZipFile::skipped() const {
  return impl_->skipped;
}

torch::Tensor TorchZipFile::read(const Entry& e) const {
  const std::string record = "data/" + e.storage_key;
  at::DataPtr data;
  std::size_t size = 0;
  try {
    std::tie(data, size) = impl_->reader->getRecord(record);
  } catch (const c10::Error& err) {
    throw CheckpointError(str("torch.save file '", impl_->path, "': tensor '", e.name,
                              "': its storage record ", record, " cannot be read (",
                              clip(err.what_without_backtrace(), 160), "): the file is damaged"));
  }
  const auto element = static_cast<std::int64_t>(c10::elementSize(e.dtype));
  const std::int64_t available = static_cast<std::int64_t>(size) / element;
  // The last element the view reaches, from its offset, sizes and strides.
  std::int64_t last = e.storage_offset;
  bool empty = false;
  for (std::size_t d = 0; d < e.shape.size(); ++d) {
    if (e.shape[d] == 0) empty = true;
    if (e.shape[d] < 0 || e.stride[d] < 0) {
      throw CheckpointError(str("torch.save file '", impl_->path, "': tensor '", e.name,
                                "' has a negative size or stride"));
    }
    last += (e.shape[d] - 1) * e.stride[d];
  }
  if (empty) return torch::empty(e.shape, torch::TensorOptions(e.dtype));
  if (e.storage_offset < 0 || last >= available) {
    throw CheckpointError(str("torch.save file '", impl_->path, "': tensor '", e.name,
                              "' reaches element ", last, " of its storage ", record,
                              ", which holds ", available, " (", size,
                              " bytes): the file is damaged"));
  }
  torch::Tensor storage = torch::from_blob(data.get(), {available}, torch::TensorOptions(e.dtype));
  return storage.as_strided(e.shape, e.stride, e.storage_offset)
      .clone(at::MemoryFormat::Contiguous);
}

}  // namespace hpctrain::checkpoint::torchzip
