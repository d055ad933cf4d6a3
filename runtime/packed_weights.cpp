#include "runtime/packed_weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/file_lock.h"
#include "runtime/printable.h"
#include "runtime/process_identity.h"
#include "runtime/weight_cache.h"

namespace dit {

namespace {

namespace fs = std::filesystem;

// 2: the header records the host and the checkpoint file (the entries of version 1, all made
// before, are removed as stale: remove_stale_entries).
constexpr const char* kVersion = "2";
constexpr size_t kHeader = 4096;  // the payload starts page-aligned
constexpr size_t kTellFrom = size_t(256) << 20;  // bytes packed by a process before it says so

template <class T>
void list(std::ostringstream& os, const char* name, const T* v, int n) {
  os << " " << name << "=";
  for (int i = 0; i < n; ++i) os << (i ? "," : "") << v[i];
}

struct Entry {
  std::string key, layout;
  size_t bytes = 0;
  DType dtype = DType::F32;
  FileIdentity source;  // path empty: not recorded
};

// The entry at `path` mapped, when it is exactly `e`'s; else undefined (missing, damaged or
// another key's after a hash collision: the caller makes it again).
Tensor open_entry(const std::string& path, const Entry& e) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Tensor();
  struct stat st {};
  std::string header(kHeader, '\0');
  const bool sized = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) == kHeader + e.bytes;
  if (!sized || ::pread(fd, header.data(), kHeader, 0) != ssize_t(kHeader)) {
    ::close(fd);
    return Tensor();
  }
  bool ours = false;
  try {  // a header of other types than ours (value() would throw) is not ours either
    const nlohmann::json h = nlohmann::json::parse(header.c_str(), nullptr, /*allow_exceptions=*/false);
    ours = h.is_object() && h.value("version", "") == kVersion && h.value("key", "") == e.key &&
           h.value("layout", "") == e.layout && h.value("bytes", uint64_t(0)) == e.bytes;
  } catch (const nlohmann::json::exception&) {
  }
  void* p = ours ? ::mmap(nullptr, kHeader + e.bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (p == MAP_FAILED) return Tensor();
  const size_t len = kHeader + e.bytes;
  std::shared_ptr<void> owner(p, [len](void* q) { ::munmap(q, len); });
  return Tensor::view(static_cast<char*>(p) + kHeader, {int64_t(e.bytes / dtype_size(e.dtype))}, e.dtype, owner);
}

void write_entry(const std::string& path, const Entry& e, const std::function<void(void*)>& fill) {
  Tensor buf = Tensor::empty({int64_t(e.bytes / dtype_size(e.dtype))}, e.dtype);
  fill(buf.data());
  std::string header;
  try {
    nlohmann::json h{{"version", kVersion}, {"key", e.key},   {"layout", e.layout},
                     {"bytes", e.bytes},   {"host", host_name()}};
    if (!e.source.path.empty())
      h["source"] = {{"path", e.source.path}, {"size", e.source.size}, {"mtime_ns", e.source.mtime_ns}};
    header = h.dump();
  } catch (const nlohmann::json::exception& x) {  // a key that is not valid UTF-8
    DIT_FAIL("cannot write the header: " << x.what());
  }
  DIT_CHECK(header.size() < kHeader, "the header is " << header.size() << " bytes (a key too long for " << kHeader << ")");
  header.resize(kHeader, ' ');
  header.back() = '\n';
  AtomicFile f(path);
  f.write(header.data(), header.size());
  f.write(buf.data(), e.bytes);
  f.commit();
}

// The JSON header of the file at `path`; null when it cannot be read or parsed.
nlohmann::json read_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  std::string header(kHeader, '\0');
  const bool read = ::pread(fd, header.data(), kHeader, 0) == ssize_t(kHeader);
  ::close(fd);
  return read ? nlohmann::json::parse(header.c_str(), nullptr, /*allow_exceptions=*/false) : nullptr;
}

// Whether an entry (its header h) can never be read again by a process of this host: made
// here by another format version, or from a checkpoint file that is gone or changed. Entries
// another host made (a directory several machines share) are left to it: its files and
// versions are not ours to judge. Version 1 did not record the host; all its entries were
// made before this version and are stale wherever they were made.
bool stale_entry(const nlohmann::json& h) {
  try {
    if (!h.is_object()) return false;  // not an entry (or damaged): left alone
    const std::string version = h.value("version", "");
    if (version == "1") return true;
    if (h.value("host", "") != host_name()) return false;
    if (version != kVersion) return true;
    if (!h.contains("source")) return false;
    const nlohmann::json& s = h.at("source");
    return !is_current({s.at("path").get<std::string>(), s.at("size").get<uint64_t>(), s.at("mtime_ns").get<int64_t>()});
  } catch (const nlohmann::json::exception&) {  // fields of other types: not one of ours
    return false;
  }
}

}  // namespace

size_t remove_stale_entries(const std::string& dir) noexcept {
  return remove_files_if(dir, ".packed", "packed weights of changed or deleted checkpoints or of an older dit-gen",
                         [](const std::string& p) { return stale_entry(read_header(p)); })
      .files;
}

void pack_weight(const dnnl::memory::desc& user, const void* plain, const dnnl::memory::desc& packed, void* dst) {
  dnnl_call("packing a weight", [&] {
    auto& eng = Engine::get();
    dnnl::memory from(user, eng.engine, const_cast<void*>(plain)), to(packed, eng.engine, dst);
    dnnl::reorder(from, to).execute(eng.stream, from, to);
    eng.stream.wait();
  });
}

bool has_inner_blocks(const dnnl::memory::desc& md) {
  return md.data.format_kind == dnnl_blocked && md.data.format_desc.blocking.inner_nblks > 0;
}

std::string describe_layout(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  std::ostringstream os;
  if (d.format_kind == dnnl_format_kind_wino) {  // a Winograd convolution's weights (runtime/conv2d_winograd.h)
    const dnnl_wino_desc_t& w = d.format_desc.wino_desc;
    os << "dt=" << int(d.data_type);
    list(os, "dims", d.dims, d.ndims);
    os << " wino=" << int(w.wino_format) << " r=" << w.r << " alpha=" << w.alpha << " ic=" << w.ic << " oc=" << w.oc
       << " blocks=" << w.ic_block << "," << w.oc_block << "," << w.ic2_block << "," << w.oc2_block
       << " adj_scale=" << w.adj_scale << " size=" << w.size << " dnnl=" << dnnl_version()->major << "."
       << dnnl_version()->minor << "." << dnnl_version()->patch;
    return os.str();
  }
  if (d.format_kind != dnnl_blocked) return "";  // not one we can name (and so keep)
  os << "dt=" << int(d.data_type);
  list(os, "dims", d.dims, d.ndims);
  list(os, "padded", d.padded_dims, d.ndims);
  list(os, "offsets", d.padded_offsets, d.ndims);
  os << " offset0=" << d.offset0;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  list(os, "strides", b.strides, d.ndims);
  list(os, "blocks", b.inner_blks, b.inner_nblks);
  list(os, "idxs", b.inner_idxs, b.inner_nblks);
  os << " extra=" << d.extra.flags << "," << d.extra.compensation_mask << "," << d.extra.scale_adjust << " dnnl="
     << dnnl_version()->major << "." << dnnl_version()->minor << "." << dnnl_version()->patch;
  return os.str();
}

PackedWeightDir::PackedWeightDir(std::string dir, bool optional) : dir_(std::move(dir)), optional_(optional) {
  DIT_CHECK(!dir_.empty(), "packed weights: no directory");
}

Tensor PackedWeightDir::get(const std::string& key, const dnnl::memory::desc& packed,
                            const std::function<void(void*)>& fill, const std::function<size_t()>& release_plain,
                            const FileIdentity& source) const {
  const std::string id = key + "|" + describe_layout(packed);
  std::lock_guard<std::mutex> hold(mu_);
  if (failed_) return Tensor();  // an optional directory that failed once is not tried again
  if (auto it = mapped_.find(id); it != mapped_.end())
    if (std::shared_ptr<Tensor> t = it->second.lock()) return Tensor::view(t->data(), t->shape(), t->dtype(), t);
  Tensor t;
  try {
    t = get_or_throw(key, packed, fill, release_plain, source);
  } catch (const Error& e) {
    if (!optional_) throw;
    std::fprintf(stderr, "warning: %s; reading the weights in place (--weight-cache off silences this)\n",
                 printable(e.what()).c_str());
    failed_ = true;
    return Tensor();
  }
  if (!t.defined()) return t;
  auto keep = std::make_shared<Tensor>(std::move(t));  // the mapping, while a view of it lives
  mapped_[id] = keep;
  return Tensor::view(keep->data(), keep->shape(), keep->dtype(), keep);
}

Tensor PackedWeightDir::get_or_throw(const std::string& key, const dnnl::memory::desc& packed,
                                     const std::function<void(void*)>& fill,
                                     const std::function<size_t()>& release_plain, const FileIdentity& source) const {
  Entry e;
  e.key = key;
  e.source = source;
  e.layout = describe_layout(packed);
  e.bytes = packed.get_size();
  const auto dt = packed.data_type();
  DIT_CHECK(dt == dnnl::memory::data_type::f32 || dt == dnnl::memory::data_type::bf16,
            "packed weights: a layout of another type than f32 or bf16");
  e.dtype = dt == dnnl::memory::data_type::bf16 ? DType::BF16 : DType::F32;
  if (e.layout.empty() || e.bytes == 0) return Tensor();  // nothing we can keep
  const std::string path = dir_ + "/" + hex16(fnv1a(std::string(kVersion) + "|" + key + "|" + e.layout)) + ".packed";
  if (Tensor t = open_entry(path, e); t.defined()) return t;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  DIT_CHECK(!ec, "weight cache " << dir_ << ": cannot create the directory: " << ec.message());
  FileLock lock(dir_ + "/.lock");
  if (Tensor t = open_entry(path, e); t.defined()) return t;  // another process made it while we waited
  if (made_ == 0) {  // once per process, when it adds to the directory
    remove_stale_temp_files(dir_);  // what writers killed mid-entry left (runtime/atomic_file.h)
    remove_stale_entries(dir_);
  }
  try {
    write_entry(path, e, fill);
  } catch (const Error& x) {
    DIT_FAIL("weight cache " << path << ": cannot write the packed weight " << key << ": " << x.what());
  }
  ++made_;
  if (release_plain) {  // read once to pack it; the entry is what is read from now on
    try {
      release_plain();
    } catch (const Error&) {  // (only memory is at stake: the entry stands)
    }
  }
  // One line, from a process that packs enough for it to take a while (a first run of a large
  // model writes every linear and convolution weight once).
  made_bytes_ += e.bytes;
  if (!told_ && made_bytes_ >= kTellFrom) {
    told_ = true;
    std::fprintf(stderr,
                 "weight cache: packing the weights into the kernels' layout once (a copy on disk, %.0f MB so "
                 "far), into %s; later runs map them\n",
                 double(made_bytes_) / 1e6, printable(dir_).c_str());
  }
  Tensor t = open_entry(path, e);
  DIT_CHECK(t.defined(), "weight cache " << path << ": the packed weight just written does not read back");
  return t;
}

}  // namespace dit
