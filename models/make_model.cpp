#include "models/make_model.h"

#include <unistd.h>

#include <filesystem>

#include "models/dit/make_dit.h"
#include "models/pixart/make_pixart.h"
#include "runtime/error.h"

namespace dit {

namespace {

// Each family's presets: their names and the writer of a whole pipeline directory.
struct PresetEntry {
  std::vector<std::string> (*names)();
  void (*write)(const MakeModelOptions& opt, const std::filesystem::path& dir);
};

const std::vector<PresetEntry>& preset_table() {
  static const std::vector<PresetEntry> t = {
      {dit_preset_names, write_dit_pipeline},
      {pixart_preset_names, write_pixart_pipeline},
  };
  return t;
}

}  // namespace

std::vector<std::string> model_presets() {
  std::vector<std::string> names;
  for (const PresetEntry& e : preset_table())
    for (const std::string& n : e.names()) names.push_back(n);
  return names;
}

void make_model(const MakeModelOptions& opt) {
  namespace fs = std::filesystem;
  const PresetEntry* preset = nullptr;
  for (const PresetEntry& e : preset_table())
    for (const std::string& n : e.names())
      if (n == opt.preset) preset = &e;
  if (!preset) {
    std::string all;
    for (const std::string& n : model_presets()) all += (all.empty() ? "" : ", ") + n;
    DIT_FAIL("--preset: unknown preset '" << opt.preset << "' (available: " << all << ")");
  }
  DIT_CHECK(opt.layers >= 0 && opt.layers <= 1024, "--layers must be in 1..1024");
  DIT_CHECK(opt.shards >= 1 && opt.shards <= 1000, "--shards must be in 1..1000");
  DIT_CHECK(opt.text_layers >= 0 && opt.text_layers <= 1024, "--text-layers must be in 1..1024");
  DIT_CHECK(opt.text_shards >= 1 && opt.text_shards <= 1000, "--text-shards must be in 1..1000");
  DIT_CHECK(!opt.out_dir.empty(), "--out: an output directory is required");
  const fs::path out = fs::path(opt.out_dir);
  DIT_CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)),
            "--out: '" << opt.out_dir << "' already exists and is not an empty directory");

  // Write into a temporary sibling, then rename: an interrupted run leaves no half model.
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent);
  const fs::path tmp = parent / (out.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp);
  try {
    fs::create_directories(tmp);
    preset->write(opt, tmp);
    if (fs::exists(out)) fs::remove(out);  // empty directory
    fs::rename(tmp, out);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp);
    DIT_FAIL("--out: cannot write '" << opt.out_dir << "': " << e.code().message());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace dit
