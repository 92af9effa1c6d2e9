#include "builder/plan_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "onnx/exporter.h"
#include "onnx/importer.h"

namespace kiln {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'P', 'L', 'A', 'N'};
constexpr size_t kHeaderSize = 96;
constexpr size_t kTrailerSize = 8;
constexpr size_t kWeightsAlign = 4096;  // section start: page aligned for mmap
constexpr size_t kTensorAlign = 64;     // each tensor: cache-line / AVX-512 aligned

struct Header {
  uint32_t version = 0;
  uint32_t header_size = 0;
  uint64_t file_size = 0;
  uint64_t meta_offset = 0, meta_size = 0;
  uint64_t graph_offset = 0, graph_size = 0;
  uint64_t weights_offset = 0, weights_size = 0;
};

void put_u32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t get_u32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

class MappedPlan : public PlanStorage {
 public:
  MappedPlan(void* p, size_t n) : p_(p), n_(n) {}
  ~MappedPlan() override {
    if (p_) munmap(p_, n_);
  }
  const std::byte* data() const override { return static_cast<const std::byte*>(p_); }
  size_t size() const override { return n_; }

 private:
  void* p_;
  size_t n_;
};

class HeapPlan : public PlanStorage {
 public:
  explicit HeapPlan(size_t n) : n_(n), buf_(new std::byte[n + kWeightsAlign]) {
    auto addr = reinterpret_cast<uintptr_t>(buf_.get());
    base_ = buf_.get() + (align_up(addr, kWeightsAlign) - addr);
  }
  std::byte* mutable_data() { return base_; }
  const std::byte* data() const override { return base_; }
  size_t size() const override { return n_; }

 private:
  size_t n_;
  std::unique_ptr<std::byte[]> buf_;
  std::byte* base_ = nullptr;
};

}  // namespace

uint64_t plan_checksum(const std::byte* data, size_t size) {
  // 64-bit multiply-xorshift over 8-byte words: fast (GB/s) and sensitive to every bit
  // and to word order, which is what detecting a damaged or truncated file needs.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ size;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  for (; i < size; ++i) {
    h = (h ^ static_cast<uint64_t>(data[i])) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
  }
  return h;
}

Result<std::shared_ptr<PlanStorage>> map_plan_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open engine file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("engine file '", path, "' is not a regular file");
  }
  size_t n = static_cast<size_t>(st.st_size);
  if (n == 0) {
    ::close(fd);
    return invalid_model("engine file '", path, "' is empty");
  }
  // Private and writable (copy-on-write): weights are views into the mapping, and a
  // kernel must never be able to change the file through them.
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return io_error("cannot map engine file '", path, "': ", std::strerror(errno));
  return std::shared_ptr<PlanStorage>(std::make_shared<MappedPlan>(p, n));
}

std::shared_ptr<PlanStorage> copy_plan_bytes(const void* data, size_t size) {
  auto h = std::make_shared<HeapPlan>(size);
  if (size) std::memcpy(h->mutable_data(), data, size);
  return h;
}

Result<std::string> write_plan(const nlohmann::json& meta, const Graph& graph) {
  // Weights are laid out in the order the exporter meets them (graph order, so the same
  // graph gives the same bytes); identical tensors (shared storage) are stored once.
  std::vector<const Tensor*> tensors;
  std::map<std::pair<const void*, size_t>, int64_t> offset_of;
  size_t weights_size = 0;
  WeightSink sink = [&](const Tensor& t, std::string* location, int64_t* offset) {
    if (t.nbytes() < 64) return false;  // tiny tensors stay inline in the graph
    auto it = offset_of.find({t.raw(), t.nbytes()});
    if (it == offset_of.end()) {
      weights_size = align_up(weights_size, kTensorAlign);
      it = offset_of.emplace(std::make_pair(t.raw(), t.nbytes()), static_cast<int64_t>(weights_size)).first;
      tensors.push_back(&t);
      weights_size += t.nbytes();
    }
    *location = kPlanWeightsLocation;
    *offset = it->second;
    return true;
  };
  KILN_ASSIGN_OR_RETURN(std::string graph_bytes, export_onnx_bytes(graph, &sink));
  std::string meta_text = meta.dump();

  Header h;
  h.version = kPlanFormatVersion;
  h.header_size = kHeaderSize;
  h.meta_offset = kHeaderSize;
  h.meta_size = meta_text.size();
  h.graph_offset = h.meta_offset + h.meta_size;
  h.graph_size = graph_bytes.size();
  h.weights_offset = align_up(h.graph_offset + h.graph_size, kWeightsAlign);
  h.weights_size = weights_size;
  h.file_size = h.weights_offset + h.weights_size + kTrailerSize;

  std::string out(h.file_size, '\0');
  std::memcpy(out.data(), kMagic, 8);
  put_u32(out, 8, h.version);
  put_u32(out, 12, h.header_size);
  put_u64(out, 16, h.file_size);
  put_u64(out, 24, h.meta_offset);
  put_u64(out, 32, h.meta_size);
  put_u64(out, 40, h.graph_offset);
  put_u64(out, 48, h.graph_size);
  put_u64(out, 56, h.weights_offset);
  put_u64(out, 64, h.weights_size);
  std::memcpy(out.data() + h.meta_offset, meta_text.data(), meta_text.size());
  std::memcpy(out.data() + h.graph_offset, graph_bytes.data(), graph_bytes.size());
  for (const Tensor* t : tensors) {
    std::memcpy(out.data() + h.weights_offset + static_cast<size_t>(offset_of[{t->raw(), t->nbytes()}]), t->raw(), t->nbytes());
  }
  uint64_t sum = plan_checksum(reinterpret_cast<const std::byte*>(out.data()), h.file_size - kTrailerSize);
  put_u64(out, h.file_size - kTrailerSize, sum);
  return out;
}

Result<PlanSections> read_plan(const PlanStorage& storage, const std::string& what) {
  const std::byte* p = storage.data();
  const size_t n = storage.size();
  if (n < kHeaderSize + kTrailerSize || std::memcmp(p, kMagic, 8) != 0) {
    return invalid_model(what, ": not a kiln engine file (bad magic or too short: ", n, " bytes)");
  }
  Header h;
  h.version = get_u32(p + 8);
  h.header_size = get_u32(p + 12);
  h.file_size = get_u64(p + 16);
  h.meta_offset = get_u64(p + 24);
  h.meta_size = get_u64(p + 32);
  h.graph_offset = get_u64(p + 40);
  h.graph_size = get_u64(p + 48);
  h.weights_offset = get_u64(p + 56);
  h.weights_size = get_u64(p + 64);
  if (h.version != kPlanFormatVersion) {
    return unsupported(what, ": engine format version ", h.version, ", this kiln reads version ", kPlanFormatVersion,
                       "; rebuild the engine with this kiln");
  }
  if (h.file_size != n) {
    return invalid_model(what, ": truncated or padded engine file (header says ", h.file_size, " bytes, file has ", n, ")");
  }
  if (h.header_size != kHeaderSize) return invalid_model(what, ": bad header size ", h.header_size);
  const uint64_t body_end = n - kTrailerSize;
  auto in_bounds = [&](uint64_t off, uint64_t size) { return off >= kHeaderSize && off <= body_end && size <= body_end - off; };
  if (!in_bounds(h.meta_offset, h.meta_size) || !in_bounds(h.graph_offset, h.graph_size) ||
      !in_bounds(h.weights_offset, h.weights_size) || h.meta_offset + h.meta_size > h.graph_offset ||
      h.graph_offset + h.graph_size > h.weights_offset || h.weights_offset % kWeightsAlign != 0) {
    return invalid_model(what, ": corrupt engine file (section table out of bounds or overlapping)");
  }
  const uint64_t want = get_u64(p + body_end);
  if (plan_checksum(p, body_end) != want) {
    return invalid_model(what, ": corrupt engine file (checksum mismatch: the file was damaged or modified)");
  }
  PlanSections s;
  const char* meta = reinterpret_cast<const char*>(p + h.meta_offset);
  s.meta = nlohmann::json::parse(meta, meta + h.meta_size, nullptr, /*allow_exceptions=*/false);
  if (s.meta.is_discarded() || !s.meta.is_object()) return invalid_model(what, ": corrupt engine file (metadata is not valid JSON)");
  s.graph_onnx.assign(reinterpret_cast<const char*>(p + h.graph_offset), h.graph_size);
  s.weights = p + h.weights_offset;
  s.weights_size = h.weights_size;
  return s;
}

Result<std::unique_ptr<Graph>> import_plan_graph(const PlanSections& plan, const std::string& what) {
  WeightResolver resolve = [&plan](const std::string& location, int64_t offset, int64_t length, DataType dt,
                                   const Dims& dims) -> Result<Tensor> {
    if (location != kPlanWeightsLocation) return invalid_model("weights at unknown location '", location, "'");
    long double elems = 1;
    for (int64_t d : dims) elems *= static_cast<long double>(d);
    const long double bytes = elems * static_cast<long double>(dtype_size(dt));
    if (offset < 0 || length < 0 || bytes != static_cast<long double>(length) || offset % kTensorAlign != 0 ||
        static_cast<uint64_t>(offset) > plan.weights_size ||
        static_cast<uint64_t>(length) > plan.weights_size - static_cast<uint64_t>(offset)) {
      return invalid_model("weights [", offset, ", +", length, ") do not fit the ", plan.weights_size,
                           "-byte weights section or the tensor ", dtype_name(dt), dims_str(dims));
    }
    // The storage is a private, copy-on-write mapping (or a heap copy): writable views.
    auto* base = const_cast<std::byte*>(plan.weights);
    return Tensor::wrap(dt, dims, base + offset);
  };
  auto imported = import_onnx_bytes(plan.graph_onnx, ".", what + " (graph section)", &resolve);
  if (!imported) return imported.status();
  return std::move(imported->graph);
}

}  // namespace kiln
