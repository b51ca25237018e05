// torch.save archives in three steps: the ZIP central directory -> named stored entries;
// <archive>/data.pkl -> a value tree on a pickle machine that never calls anything; the tree ->
// MaskEmbeddingFile, copying the tensor out of <archive>/data/<key>. Every read is checked against
// the input's size, and nothing is allocated from a size field before it is known to fit.
#include "io/torch_pickle.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string_view>
#include <utility>

#include "io/zip_archive.h"

namespace mimo {
namespace {

// Storage bytes are copied as they are; torch writes them little-endian (byteorder "little").
static_assert(std::endian::native == std::endian::little, "torch storages are little-endian");

using zip::Bytes;
using zip::Fits;
using zip::LoadLE;
using zip::Printable;
using zip::ZipArchive;
using zip::ZipEntry;

// ---------------------------------------------------------------------------------------------
// Pickle: values live in one arena and refer to each other by index, so memo sharing and even
// self-referencing containers are just indices (no ownership cycles, no recursion).

enum class GlobalKind : uint8_t { kRebuildTensorV2, kRebuildParameter, kOrderedDict, kStorage };

struct Value {
  enum class Kind : uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kTuple,
    kList,
    kDict,
    kOrderedDict,
    kGlobal,
    kStorage,
    kTensor
  };
  Kind kind = Kind::kNone;
  GlobalKind global = GlobalKind::kOrderedDict;  // kGlobal
  DType dtype = DType::kF32;                     // kGlobal (a storage class), kStorage
  int64_t i = 0;              // kBool, kInt; kStorage: numel; kTensor: storage offset
  std::string s;              // kStr
  std::vector<size_t> items;  // kTuple, kList; kDict / kOrderedDict: key, value, key, value, ...;
                              // kTensor: storage, size tuple, stride tuple; kStorage: key (a str)
};

const char* KindName(Value::Kind k) {
  static constexpr const char* kNames[] = {"None",        "bool",   "int",     "float",
                                           "str",         "tuple",  "list",    "dict",
                                           "OrderedDict", "global", "storage", "tensor"};
  return kNames[static_cast<size_t>(k)];
}

// Names of the standard pickle opcodes, for messages about the ones this reader refuses.
const char* OpcodeName(uint8_t op) {
  // Opcodes 0x80..0x98 (protocols 2 to 5) by value; the protocol 0/1 ones are printable
  // characters, each entry below starting with its opcode.
  static constexpr const char* kHigh[] = {"PROTO",
                                          "NEWOBJ",
                                          "EXT1",
                                          "EXT2",
                                          "EXT4",
                                          "TUPLE1",
                                          "TUPLE2",
                                          "TUPLE3",
                                          "NEWTRUE",
                                          "NEWFALSE",
                                          "LONG1",
                                          "LONG4",
                                          "SHORT_BINUNICODE",
                                          "BINUNICODE8",
                                          "BINBYTES8",
                                          "EMPTY_SET",
                                          "ADDITEMS",
                                          "FROZENSET",
                                          "NEWOBJ_EX",
                                          "STACK_GLOBAL",
                                          "MEMOIZE",
                                          "FRAME",
                                          "BYTEARRAY8",
                                          "NEXT_BUFFER",
                                          "READONLY_BUFFER"};
  static constexpr const char* kLow[] = {"(MARK",          ".STOP",       "0POP",
                                         "1POP_MARK",      "2DUP",        "FFLOAT",
                                         "IINT",           "JBININT",     "KBININT1",
                                         "LLONG",          "MBININT2",    "NNONE",
                                         "PPERSID",        "QBINPERSID",  "RREDUCE",
                                         "SSTRING",        "TBINSTRING",  "USHORT_BINSTRING",
                                         "VUNICODE",       "XBINUNICODE", "aAPPEND",
                                         "bBUILD",         "cGLOBAL",     "dDICT",
                                         "}EMPTY_DICT",    "eAPPENDS",    "gGET",
                                         "hBINGET",        "iINST",       "jLONG_BINGET",
                                         "lLIST",          "]EMPTY_LIST", "oOBJ",
                                         "pPUT",           "qBINPUT",     "rLONG_BINPUT",
                                         "sSETITEM",       "tTUPLE",      ")EMPTY_TUPLE",
                                         "uSETITEMS",      "GBINFLOAT",   "BBINBYTES",
                                         "CSHORT_BINBYTES"};
  if (op >= 0x80 && op <= 0x98) return kHigh[op - 0x80];
  for (const char* entry : kLow) {
    if (static_cast<uint8_t>(entry[0]) == op) return entry + 1;
  }
  return "unknown";
}

class PickleMachine {
 public:
  // `where` prefixes every message ("<file>: <archive>/data.pkl").
  PickleMachine(Bytes pkl, std::string where) : pkl_(pkl), where_(std::move(where)) {}

  // Runs to STOP; returns the index of the unpickled object.
  StatusOr<size_t> Run();
  const Value& at(size_t id) const { return values_[id]; }

 private:
  template <typename... Args>
  Status Error(const char* fmt, Args... args) const {
    return InvalidArgument("%s byte %zu: %s", where_.c_str(), op_at_,
                           StrFormat(fmt, args...).c_str());
  }
  Status Error(const char* msg) const { return Error("%s", msg); }

  // Consumes n argument bytes of the current opcode.
  StatusOr<const uint8_t*> Take(uint64_t n) {
    if (!Fits(pkl_.size(), pos_, n)) {
      return Error("%s needs %llu argument bytes past the end of data.pkl (truncated?)",
                   OpcodeName(pkl_[op_at_]), static_cast<unsigned long long>(n));
    }
    const uint8_t* p = pkl_.data() + pos_;
    pos_ += n;
    return p;
  }
  StatusOr<std::string_view> TakeLine() {
    const uint8_t* p = pkl_.data() + pos_;
    const void* nl = pos_ < pkl_.size() ? std::memchr(p, '\n', pkl_.size() - pos_) : nullptr;
    if (nl == nullptr) return Error("GLOBAL name is not terminated by a newline");
    const size_t n = static_cast<size_t>(static_cast<const uint8_t*>(nl) - p);
    pos_ += n + 1;
    return std::string_view(reinterpret_cast<const char*>(p), n);
  }

  void Push(Value v) {
    values_.push_back(std::move(v));
    stack_.push_back(values_.size() - 1);
  }
  void Push(Value::Kind kind, int64_t i = 0) {
    Value v;
    v.kind = kind;
    v.i = i;
    Push(std::move(v));
  }
  void PushItems(Value::Kind kind, std::vector<size_t> items) {
    Value v;
    v.kind = kind;
    v.items = std::move(items);
    Push(std::move(v));
  }
  size_t Fence() const { return marks_.empty() ? 0 : marks_.back(); }
  StatusOr<size_t> Pop() {
    if (stack_.size() <= Fence()) return Error("%s on an empty stack", OpcodeName(pkl_[op_at_]));
    const size_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  StatusOr<size_t> Top() {
    if (stack_.size() <= Fence()) return Error("%s on an empty stack", OpcodeName(pkl_[op_at_]));
    return stack_.back();
  }
  StatusOr<std::vector<size_t>> PopToMark() {
    if (marks_.empty()) return Error("%s without a MARK", OpcodeName(pkl_[op_at_]));
    std::vector<size_t> items(stack_.begin() + static_cast<ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Status Memo(uint64_t index) {
    MIMO_ASSIGN_OR_RETURN(const size_t top, Top());
    memo_[index] = top;
    return Status::Ok();
  }
  Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) {
      return Error("memo entry %llu was never stored", static_cast<unsigned long long>(index));
    }
    stack_.push_back(it->second);
    return Status::Ok();
  }
  Status AddItems(size_t target, const std::vector<size_t>& items);
  Status PushGlobal(std::string_view module, std::string_view name);
  Status PersistentLoad(size_t pid);
  Status Reduce(size_t callable, size_t args);
  Status Build(size_t target, size_t state);

  Bytes pkl_;
  std::string where_;
  size_t pos_ = 0;    // next byte to read
  size_t op_at_ = 0;  // byte of the opcode being run (for messages)
  std::vector<Value> values_;
  std::vector<size_t> stack_;  // value indices
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::map<uint64_t, size_t> memo_;
};

Status PickleMachine::AddItems(size_t target, const std::vector<size_t>& items) {
  Value& t = values_[target];
  const uint8_t op = pkl_[op_at_];
  const bool to_list = op == 'a' || op == 'e';
  if (to_list ? t.kind != Value::Kind::kList
              : t.kind != Value::Kind::kDict && t.kind != Value::Kind::kOrderedDict) {
    return Error("%s on a %s", OpcodeName(op), KindName(t.kind));
  }
  if (!to_list && items.size() % 2 != 0) return Error("SETITEMS with an odd number of items");
  t.items.insert(t.items.end(), items.begin(), items.end());
  return Status::Ok();
}

// The only globals a mask-embedding pickle needs; anything else is refused here, before it could
// be used for anything.
Status PickleMachine::PushGlobal(std::string_view module, std::string_view name) {
  Value v;
  v.kind = Value::Kind::kGlobal;
  if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    v.global = GlobalKind::kRebuildTensorV2;
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    v.global = GlobalKind::kRebuildParameter;
  } else if (module == "collections" && name == "OrderedDict") {
    v.global = GlobalKind::kOrderedDict;
  } else if (module == "torch" &&
             (name == "BFloat16Storage" || name == "HalfStorage" || name == "FloatStorage")) {
    v.global = GlobalKind::kStorage;
    v.dtype = name == "BFloat16Storage" ? DType::kBF16
              : name == "HalfStorage"   ? DType::kF16
                                        : DType::kF32;
  } else if (name == "UntypedStorage" && (module == "torch" || module == "torch.storage")) {
    return Error(
        "storage class '%s.UntypedStorage' carries no element type (torch.save writes tensors "
        "with typed storage classes); expected torch.BFloat16Storage, HalfStorage or FloatStorage",
        Printable(module).c_str());
  } else if (module == "torch" && name.ends_with("Storage")) {
    return Error(
        "unsupported storage class 'torch.%s' (the mask embedding must be bf16, f16 or f32: "
        "torch.BFloat16Storage, HalfStorage or FloatStorage)",
        Printable(name).c_str());
  } else {
    return Error(
        "unsupported global '%s.%s' (only torch tensor rebuilds, typed storages and "
        "collections.OrderedDict are allowed; nothing in a pickle is ever called)",
        Printable(module).c_str(), Printable(name).c_str());
  }
  Push(std::move(v));
  return Status::Ok();
}

// torch's persistent id for a storage: ('storage', storage class, key, location, numel).
Status PickleMachine::PersistentLoad(size_t pid) {
  const Value& t = values_[pid];
  if (t.kind != Value::Kind::kTuple || t.items.size() != 5) {
    return Error("persistent id is a %s, expected ('storage', class, key, location, numel)",
                 KindName(t.kind));
  }
  const Value& tag = values_[t.items[0]];
  const Value& cls = values_[t.items[1]];
  const Value& key = values_[t.items[2]];
  const Value& location = values_[t.items[3]];
  const Value& numel = values_[t.items[4]];
  if (tag.kind != Value::Kind::kStr || tag.s != "storage") {
    return Error("persistent id does not start with 'storage'");
  }
  if (cls.kind != Value::Kind::kGlobal || cls.global != GlobalKind::kStorage) {
    return Error("persistent id names a %s, not a storage class", KindName(cls.kind));
  }
  if (key.kind != Value::Kind::kStr || location.kind != Value::Kind::kStr ||
      numel.kind != Value::Kind::kInt || numel.i < 0) {
    return Error("persistent id is not ('storage', class, str key, str location, int numel >= 0)");
  }
  Value v;
  v.kind = Value::Kind::kStorage;
  v.dtype = cls.dtype;
  v.items = {t.items[2]};  // the key's id: a memoised key is shared, not copied
  v.i = numel.i;
  Push(std::move(v));
  return Status::Ok();
}

// A call, recorded as data: only the rebuild functions and OrderedDict(), with their arguments'
// types checked. The tensor's layout is checked when it is extracted (ignored keys may hold
// anything this machine can represent).
Status PickleMachine::Reduce(size_t callable, size_t args) {
  const Value& f = values_[callable];
  const Value& a = values_[args];
  if (f.kind != Value::Kind::kGlobal) return Error("REDUCE calls a %s", KindName(f.kind));
  if (a.kind != Value::Kind::kTuple) return Error("REDUCE arguments are a %s", KindName(a.kind));
  // Every check below is O(1) or bounded by kMaxDims, so a hostile pickle that REDUCEs a
  // memoised huge tuple again and again costs no more than its own bytes.
  constexpr size_t kMaxArgs = 7, kMaxDims = 64;
  if (a.items.size() > kMaxArgs) return Error("REDUCE with %zu arguments", a.items.size());
  const std::vector<size_t> arg = a.items;  // copied: Push below may move values_
  auto kind_of = [&](size_t i) { return values_[arg[i]].kind; };
  auto is_empty_mapping = [&](size_t i) {
    const Value& m = values_[arg[i]];
    return (m.kind == Value::Kind::kDict || m.kind == Value::Kind::kOrderedDict) && m.items.empty();
  };
  auto is_int_tuple = [&](size_t i) {
    const Value& t = values_[arg[i]];
    return t.kind == Value::Kind::kTuple && t.items.size() <= kMaxDims &&
           std::all_of(t.items.begin(), t.items.end(),
                       [&](size_t e) { return values_[e].kind == Value::Kind::kInt; });
  };
  switch (f.global) {
    case GlobalKind::kOrderedDict: {
      if (!arg.empty()) return Error("collections.OrderedDict called with arguments");
      Value v;
      v.kind = Value::Kind::kOrderedDict;
      Push(std::move(v));
      return Status::Ok();
    }
    case GlobalKind::kRebuildTensorV2: {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      if (arg.size() != 6 && arg.size() != 7) {
        return Error("_rebuild_tensor_v2 takes 6 or 7 arguments, got %zu", arg.size());
      }
      if (kind_of(0) != Value::Kind::kStorage || kind_of(1) != Value::Kind::kInt ||
          !is_int_tuple(2) || !is_int_tuple(3) || kind_of(4) != Value::Kind::kBool) {
        return Error(
            "_rebuild_tensor_v2 arguments are not (storage, int offset, int tuple size, int tuple "
            "stride, bool requires_grad, ...) with at most %zu dimensions",
            kMaxDims);
      }
      if (!is_empty_mapping(5)) {
        return Error("_rebuild_tensor_v2 backward_hooks is not an empty OrderedDict");
      }
      if (arg.size() == 7 && kind_of(6) != Value::Kind::kNone && !is_empty_mapping(6)) {
        return Error("tensor carries metadata (a %s); only plain tensors are supported",
                     KindName(kind_of(6)));
      }
      Value v;
      v.kind = Value::Kind::kTensor;
      v.i = values_[arg[1]].i;
      v.items = {arg[0], arg[2], arg[3]};
      Push(std::move(v));
      return Status::Ok();
    }
    case GlobalKind::kRebuildParameter: {
      // (data, requires_grad, backward_hooks): an nn.Parameter is its data tensor here.
      if (arg.size() != 3 || kind_of(0) != Value::Kind::kTensor ||
          kind_of(1) != Value::Kind::kBool || !is_empty_mapping(2)) {
        return Error("_rebuild_parameter arguments are not (tensor, bool, empty OrderedDict)");
      }
      stack_.push_back(arg[0]);
      return Status::Ok();
    }
    case GlobalKind::kStorage:
      return Error("a storage class is called; storages come only from persistent ids");
  }
  return Error("REDUCE of an unknown global");
}

// BUILD sets an object's state; the only object that meets it here is an OrderedDict, whose state
// (its instance __dict__) is None or empty.
Status PickleMachine::Build(size_t target, size_t state) {
  const Value& t = values_[target];
  const Value& s = values_[state];
  if (t.kind != Value::Kind::kOrderedDict) return Error("BUILD on a %s", KindName(t.kind));
  if (s.kind == Value::Kind::kNone) return Status::Ok();
  if (s.kind == Value::Kind::kDict && s.items.empty()) return Status::Ok();
  return Error("BUILD gives an OrderedDict a %s state", KindName(s.kind));
}

StatusOr<size_t> PickleMachine::Run() {
  for (;;) {
    if (pos_ >= pkl_.size()) {
      op_at_ = pkl_.size();
      return Error("data.pkl ends without STOP (truncated pickle)");
    }
    op_at_ = pos_;
    const uint8_t op = pkl_[pos_++];
    switch (op) {
      case 0x80: {  // PROTO
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(1));
        if (*p < 2 || *p > 5) return Error("pickle protocol %u is not supported", unsigned{*p});
        break;
      }
      case 0x95: {  // FRAME: a length prefix for the data that follows; nothing to do
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(8));
        const uint64_t n = LoadLE<uint64_t>(p);
        if (!Fits(pkl_.size(), pos_, n)) return Error("FRAME runs past the end of data.pkl");
        break;
      }
      case '}':  // EMPTY_DICT
        Push(Value::Kind::kDict);
        break;
      case ')':  // EMPTY_TUPLE
        Push(Value::Kind::kTuple);
        break;
      case ']':  // EMPTY_LIST
        Push(Value::Kind::kList);
        break;
      case '(':  // MARK
        marks_.push_back(stack_.size());
        break;
      case 't': {  // TUPLE
        MIMO_ASSIGN_OR_RETURN(std::vector<size_t> items, PopToMark());
        PushItems(Value::Kind::kTuple, std::move(items));
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<size_t> items(op - 0x84);
        for (size_t k = items.size(); k-- > 0;) {
          MIMO_ASSIGN_OR_RETURN(items[k], Pop());
        }
        PushItems(Value::Kind::kTuple, std::move(items));
        break;
      }
      case 'a': {  // APPEND
        MIMO_ASSIGN_OR_RETURN(const size_t v, Pop());
        MIMO_ASSIGN_OR_RETURN(const size_t list, Top());
        MIMO_RETURN_IF_ERROR(AddItems(list, {v}));
        break;
      }
      case 's': {  // SETITEM
        MIMO_ASSIGN_OR_RETURN(const size_t v, Pop());
        MIMO_ASSIGN_OR_RETURN(const size_t k, Pop());
        MIMO_ASSIGN_OR_RETURN(const size_t dict, Top());
        MIMO_RETURN_IF_ERROR(AddItems(dict, {k, v}));
        break;
      }
      case 'e':    // APPENDS
      case 'u': {  // SETITEMS
        MIMO_ASSIGN_OR_RETURN(const std::vector<size_t> items, PopToMark());
        MIMO_ASSIGN_OR_RETURN(const size_t target, Top());
        MIMO_RETURN_IF_ERROR(AddItems(target, items));
        break;
      }
      case 'J': {  // BININT
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(4));
        Push(Value::Kind::kInt, LoadLE<int32_t>(p));
        break;
      }
      case 'K': {  // BININT1
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(1));
        Push(Value::Kind::kInt, *p);
        break;
      }
      case 'M': {  // BININT2
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(2));
        Push(Value::Kind::kInt, LoadLE<uint16_t>(p));
        break;
      }
      case 0x8a: {  // LONG1: n bytes of little-endian two's complement
        MIMO_ASSIGN_OR_RETURN(const uint8_t* pn, Take(1));
        const size_t n = *pn;
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(n));
        if (n > 8) return Error("LONG1 integer of %zu bytes does not fit in 64 bits", n);
        uint64_t u = 0;
        for (size_t k = 0; k < n; ++k) u |= uint64_t{p[k]} << (8 * k);
        if (n > 0 && n < 8 && (p[n - 1] & 0x80)) u |= ~uint64_t{0} << (8 * n);  // sign-extend
        Push(Value::Kind::kInt, static_cast<int64_t>(u));
        break;
      }
      case 'X':     // BINUNICODE
      case 0x8c:    // SHORT_BINUNICODE
      case 0x8d: {  // BINUNICODE8
        const size_t width = op == 0x8c ? 1 : op == 'X' ? 4 : 8;
        MIMO_ASSIGN_OR_RETURN(const uint8_t* pn, Take(width));
        const uint64_t n = width == 1   ? *pn
                           : width == 4 ? LoadLE<uint32_t>(pn)
                                        : LoadLE<uint64_t>(pn);
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(n));
        Value v;
        v.kind = Value::Kind::kStr;
        v.s.assign(reinterpret_cast<const char*>(p), n);
        Push(std::move(v));
        break;
      }
      case 'G': {  // BINFLOAT (big-endian double; kept only as a value that is ignored)
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(8));
        (void)p;
        Push(Value::Kind::kFloat);
        break;
      }
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
        Push(Value::Kind::kBool, op == 0x88);
        break;
      case 'N':  // NONE
        Push(Value::Kind::kNone);
        break;
      case 'c': {  // GLOBAL "module\nname\n"
        MIMO_ASSIGN_OR_RETURN(const std::string_view module, TakeLine());
        MIMO_ASSIGN_OR_RETURN(const std::string_view name, TakeLine());
        MIMO_RETURN_IF_ERROR(PushGlobal(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        MIMO_ASSIGN_OR_RETURN(const size_t name, Pop());
        MIMO_ASSIGN_OR_RETURN(const size_t module, Pop());
        if (values_[name].kind != Value::Kind::kStr || values_[module].kind != Value::Kind::kStr) {
          return Error("STACK_GLOBAL needs two strings");
        }
        // Views into values_: PushGlobal is done with them before it pushes.
        MIMO_RETURN_IF_ERROR(PushGlobal(values_[module].s, values_[name].s));
        break;
      }
      case 'Q': {  // BINPERSID
        MIMO_ASSIGN_OR_RETURN(const size_t pid, Pop());
        MIMO_RETURN_IF_ERROR(PersistentLoad(pid));
        break;
      }
      case 'R': {  // REDUCE
        MIMO_ASSIGN_OR_RETURN(const size_t args, Pop());
        MIMO_ASSIGN_OR_RETURN(const size_t callable, Pop());
        MIMO_RETURN_IF_ERROR(Reduce(callable, args));
        break;
      }
      case 'b': {  // BUILD
        MIMO_ASSIGN_OR_RETURN(const size_t state, Pop());
        MIMO_ASSIGN_OR_RETURN(const size_t target, Top());
        MIMO_RETURN_IF_ERROR(Build(target, state));
        break;
      }
      case 'q': {  // BINPUT
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(1));
        MIMO_RETURN_IF_ERROR(Memo(*p));
        break;
      }
      case 'r': {  // LONG_BINPUT
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(4));
        MIMO_RETURN_IF_ERROR(Memo(LoadLE<uint32_t>(p)));
        break;
      }
      case 0x94:  // MEMOIZE
        MIMO_RETURN_IF_ERROR(Memo(memo_.size()));
        break;
      case 'h': {  // BINGET
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(1));
        MIMO_RETURN_IF_ERROR(Get(*p));
        break;
      }
      case 'j': {  // LONG_BINGET
        MIMO_ASSIGN_OR_RETURN(const uint8_t* p, Take(4));
        MIMO_RETURN_IF_ERROR(Get(LoadLE<uint32_t>(p)));
        break;
      }
      case '.': {  // STOP
        MIMO_ASSIGN_OR_RETURN(const size_t result, Pop());
        if (!stack_.empty() || !marks_.empty()) {
          return Error("STOP leaves %zu values and %zu marks behind", stack_.size(), marks_.size());
        }
        if (pos_ != pkl_.size()) return Error("%zu bytes follow STOP", pkl_.size() - pos_);
        return result;
      }
      default:
        return InvalidArgument("%s: unsupported pickle opcode 0x%02x (%s) at byte %zu",
                               where_.c_str(), unsigned{op}, OpcodeName(op), op_at_);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The value tree -> MaskEmbeddingFile.

// The last value stored under string key `key` (Python keeps the last of repeated keys).
const Value* Lookup(const PickleMachine& m, const Value& dict, std::string_view key) {
  const Value* found = nullptr;
  for (size_t k = 0; k + 1 < dict.items.size(); k += 2) {
    const Value& kv = m.at(dict.items[k]);
    if (kv.kind == Value::Kind::kStr && kv.s == key) found = &m.at(dict.items[k + 1]);
  }
  return found;
}

// Copies a contiguous tensor out of its storage entry.
StatusOr<TorchTensor> ExtractTensor(const PickleMachine& m, const Value& t, const ZipArchive& zip,
                                    const std::string& prefix, const std::string& what) {
  const Value& storage = m.at(t.items[0]);
  const Value& size = m.at(t.items[1]);
  const Value& stride = m.at(t.items[2]);
  const int64_t offset = t.i;
  TorchTensor out;
  out.dtype = storage.dtype;
  const size_t esize = DTypeSize(out.dtype);
  if (size.items.size() != stride.items.size()) {
    return InvalidArgument("%s: tensor has %zu sizes but %zu strides", what.c_str(),
                           size.items.size(), stride.items.size());
  }
  int64_t numel = 1;
  for (size_t id : size.items) {
    const int64_t n = m.at(id).i;
    if (n < 0 || __builtin_mul_overflow(numel, n, &numel)) {
      return InvalidArgument("%s: tensor has an invalid size", what.c_str());
    }
    out.shape.push_back(n);
  }
  // Contiguous row-major, as torch defines it: dimensions of size 1 may have any stride.
  int64_t expected = 1;
  for (size_t d = out.shape.size(); d-- > 0;) {
    if (numel == 0 || out.shape[d] == 1) continue;
    if (m.at(stride.items[d]).i != expected) {
      std::string sizes, strides;
      for (size_t k = 0; k < out.shape.size(); ++k) {
        sizes += StrFormat("%s%lld", k ? ", " : "", static_cast<long long>(out.shape[k]));
        strides +=
            StrFormat("%s%lld", k ? ", " : "", static_cast<long long>(m.at(stride.items[k]).i));
      }
      return InvalidArgument(
          "%s: tensor of size [%s] has strides [%s]: it is not contiguous (save "
          "tensor.contiguous())",
          what.c_str(), sizes.c_str(), strides.c_str());
    }
    expected *= out.shape[d];
  }
  if (offset < 0 || offset > storage.i || numel > storage.i - offset) {
    return InvalidArgument(
        "%s: tensor of %lld elements at storage offset %lld does not fit its storage of %lld",
        what.c_str(), static_cast<long long>(numel), static_cast<long long>(offset),
        static_cast<long long>(storage.i));
  }
  const std::string& key = m.at(storage.items[0]).s;
  const std::string entry_name = prefix + "data/" + key;
  const ZipEntry* entry = zip.Find(entry_name);
  if (entry == nullptr) {
    return InvalidArgument("%s: storage '%s' has no archive entry '%s'", what.c_str(),
                           Printable(key).c_str(), Printable(entry_name).c_str());
  }
  if (static_cast<uint64_t>(storage.i) > entry->size / esize ||
      entry->size != static_cast<uint64_t>(storage.i) * esize) {
    return InvalidArgument("%s: storage '%s' holds %lld %s elements but its entry has %llu bytes",
                           what.c_str(), Printable(key).c_str(), static_cast<long long>(storage.i),
                           DTypeName(out.dtype).data(),
                           static_cast<unsigned long long>(entry->size));
  }
  MIMO_ASSIGN_OR_RETURN(const Bytes bytes, zip.Read(*entry));
  const Bytes slice =
      bytes.subspan(static_cast<size_t>(offset) * esize, static_cast<size_t>(numel) * esize);
  out.data.assign(slice.begin(), slice.end());
  return out;
}

}  // namespace

StatusOr<MaskEmbeddingFile> ParseMaskEmbeddingPt(std::span<const uint8_t> bytes,
                                                 const std::string& what) {
  MIMO_ASSIGN_OR_RETURN(const ZipArchive zip, ZipArchive::Parse(bytes, what));
  // The archive's records sit under one directory, the one holding data.pkl.
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : zip.entries()) {
    if (e.name == "data.pkl" || e.name.ends_with("/data.pkl")) {
      if (pkl != nullptr) {
        return InvalidArgument("%s: archive has two pickles ('%s' and '%s')", what.c_str(),
                               Printable(pkl->name).c_str(), Printable(e.name).c_str());
      }
      pkl = &e;
    }
  }
  if (pkl == nullptr) {
    return InvalidArgument("%s: zip archive has no <archive>/data.pkl: not a torch.save file",
                           what.c_str());
  }
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - std::strlen("data.pkl"));
  if (const ZipEntry* order = zip.Find(prefix + "byteorder")) {
    MIMO_ASSIGN_OR_RETURN(const Bytes b, zip.Read(*order));
    const std::string_view s(reinterpret_cast<const char*>(b.data()), b.size());
    if (s != "little") {
      return InvalidArgument("%s: archive byteorder is '%s'; only little-endian is supported",
                             what.c_str(), Printable(s).c_str());
    }
  }
  MIMO_ASSIGN_OR_RETURN(const Bytes pkl_bytes, zip.Read(*pkl));
  PickleMachine machine(pkl_bytes, what + ": " + Printable(pkl->name));
  MIMO_ASSIGN_OR_RETURN(const size_t root_id, machine.Run());
  const Value& root = machine.at(root_id);

  MaskEmbeddingFile out;
  const Value* tensor = &root;
  if (root.kind == Value::Kind::kDict || root.kind == Value::Kind::kOrderedDict) {
    tensor = Lookup(machine, root, "embedding");
    if (tensor == nullptr) {
      return InvalidArgument("%s: the saved dict has no 'embedding' key", what.c_str());
    }
    if (tensor->kind != Value::Kind::kTensor) {
      return InvalidArgument("%s: 'embedding' is a %s, expected a tensor", what.c_str(),
                             KindName(tensor->kind));
    }
    if (const Value* id = Lookup(machine, root, "mask_token_id")) {
      if (id->kind != Value::Kind::kInt || id->i < 0) {
        return InvalidArgument("%s: 'mask_token_id' is %s, expected an int >= 0", what.c_str(),
                               id->kind == Value::Kind::kInt
                                   ? StrFormat("%lld", static_cast<long long>(id->i)).c_str()
                                   : KindName(id->kind));
      }
      out.mask_token_id = id->i;
    }
  } else if (root.kind != Value::Kind::kTensor) {
    return InvalidArgument("%s: the saved object is a %s, expected a dict or a tensor",
                           what.c_str(), KindName(root.kind));
  }
  MIMO_ASSIGN_OR_RETURN(out.embedding, ExtractTensor(machine, *tensor, zip, prefix, what));
  return out;
}

StatusOr<MaskEmbeddingFile> ReadMaskEmbeddingPt(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFound("%s: no such file", path.c_str());
  if (!std::filesystem::is_regular_file(path, ec)) {
    return InvalidArgument("%s: not a regular file", path.c_str());
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("%s: cannot open", path.c_str());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return InvalidArgument("%s: read error", path.c_str());
  return ParseMaskEmbeddingPt(bytes, path);
}

}  // namespace mimo
