// The hostile-input suite's machinery (test_hostile.cpp; the cases are in hostile_cases*.h).
//
// A case copies a small fixture model (tests/data/dit-tiny or pixart-tiny) into a scratch
// directory, mutates one thing in it (a config key, a checkpoint header, a tokenizer file,
// a batch file, an output target), runs one tool as a user would, under `timeout`, and
// checks what a hostile input must get:
//   * a non-zero exit, not by a signal (no crash) and not by the timeout (no hang);
//   * exactly `lines` lines on stderr (one: the error; batch runs add their summary line);
//   * the first line is "<tool>: error: ..." (batch: "item N failed") and names the file,
//     key or flag (`needle`);
//   * nothing was written or left behind: the scratch tree (model copy, output directory)
//     is as it was, except a batch's results.jsonl, and no temporary file (*.tmp.*).
//
// Placeholders in a command: {M} the model copy, {O} an empty output directory, {S} the
// scratch directory, {D} tests/data. The first word is a tool of build/bin.
#pragma once

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"

namespace dit_test::hostile {

namespace fs = std::filesystem;
using Mutation = std::function<void(const std::string& scratch)>;

struct Case {
  std::string name;     // what is hostile about it
  std::string fixture;  // "dit-tiny", "pixart-tiny" or "" (copied to {M})
  Mutation mutate;      // may be empty
  std::string cmd;      // "dit-gen -m {M} -p 1 -o {O}/x.png"
  std::string needle;   // what the error line must name: the file, key or flag ("a|b": both)
  int lines = 1;        // lines on stderr
};

inline std::string read_all(const std::string& p) { return slurp(p); }
inline void write_all(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
  REQUIRE(f.good());
}

// Python's JSON (the fixtures' scheduler has "-Infinity") through nlohmann and back.
inline void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
}
inline nlohmann::json parse_loose(std::string text) {
  replace_all(text, "-Infinity", "\"@@NEGINF@@\"");
  return nlohmann::json::parse(text);
}
inline std::string dump_loose(const nlohmann::json& j) {
  std::string text = j.dump(2);
  replace_all(text, "\"@@NEGINF@@\"", "-Infinity");
  return text;
}

// --- mutations (paths relative to the scratch directory, e.g. "m/vae/config.json") ---

// Sets `key` ("a/b" for nested objects) to the raw JSON text `raw` (NaN, Infinity and
// -Infinity are written as such: Python's json writes them).
// The object holding the last part of `key` ("a/b/c" -> j["a"]["b"]), with that part in `leaf`.
inline nlohmann::json* parent_of(nlohmann::json& j, const std::string& key, std::string& leaf) {
  nlohmann::json* at = &j;
  leaf = key;
  for (size_t slash; (slash = leaf.find('/')) != std::string::npos; leaf = leaf.substr(slash + 1))
    at = &(*at)[leaf.substr(0, slash)];
  return at;
}

inline Mutation set_key(std::string file, std::string key, std::string raw) {
  return [=](const std::string& s) {
    const std::string p = s + "/" + file;
    nlohmann::json j = parse_loose(read_all(p));
    std::string k;
    nlohmann::json* at = parent_of(j, key, k);
    (*at)[k] = "@@HOSTILE@@";
    std::string text = dump_loose(j);
    text.replace(text.find("\"@@HOSTILE@@\""), 13, raw);
    write_all(p, text);
  };
}
inline Mutation erase_key(std::string file, std::string key) {
  return [=](const std::string& s) {
    const std::string p = s + "/" + file;
    nlohmann::json j = parse_loose(read_all(p));
    std::string k;
    nlohmann::json* at = parent_of(j, key, k);
    REQUIRE(at->erase(k) == 1);
    write_all(p, dump_loose(j));
  };
}
inline Mutation put(std::string file, std::string bytes) {
  return [=](const std::string& s) { write_all(s + "/" + file, bytes); };
}
inline Mutation remove(std::string file) {
  return [=](const std::string& s) { REQUIRE(fs::remove_all(s + "/" + file) > 0); };
}
// Keeps the first `bytes` bytes (negative: drops that many from the end).
inline Mutation truncate(std::string file, int64_t bytes) {
  return [=](const std::string& s) {
    const std::string p = s + "/" + file;
    const int64_t size = int64_t(fs::file_size(p));
    fs::resize_file(p, uintmax_t(bytes >= 0 ? bytes : size + bytes));
  };
}
inline Mutation make_dir(std::string file) {
  return [=](const std::string& s) {
    fs::remove_all(s + "/" + file);
    fs::create_directories(s + "/" + file);
  };
}
inline Mutation make_fifo(std::string file) {
  return [=](const std::string& s) {
    fs::remove_all(s + "/" + file);
    REQUIRE(::mkfifo((s + "/" + file).c_str(), 0644) == 0);
  };
}
inline Mutation make_symlink(std::string file, std::string target) {
  return [=](const std::string& s) {
    fs::remove_all(s + "/" + file);
    fs::create_symlink(target, s + "/" + file);
  };
}
// Several mutations in order.
inline Mutation both(Mutation a, Mutation b) {
  return [=](const std::string& s) {
    a(s);
    b(s);
  };
}

// A safetensors file's header: `edit` changes the parsed header, which is written back in
// front of the unchanged data.
inline Mutation st_header(std::string file, std::function<void(nlohmann::json&)> edit) {
  return [=](const std::string& s) {
    const std::string p = s + "/" + file;
    const std::string bytes = read_all(p);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
    edit(h);
    std::string text = h.dump();
    const uint64_t m = text.size();
    std::string out(8, '\0');
    std::memcpy(&out[0], &m, 8);
    write_all(p, out + text + bytes.substr(8 + n));
  };
}
// The 8-byte header length replaced by `n`.
inline Mutation st_header_len(std::string file, uint64_t n) {
  return [=](const std::string& s) {
    const std::string p = s + "/" + file;
    std::string bytes = read_all(p);
    std::memcpy(&bytes[0], &n, 8);
    write_all(p, bytes);
  };
}
// The header's text replaced by `text` (the length field matches it).
inline Mutation st_header_text(std::string file, std::string text) {
  return [=](const std::string& s) {
    const std::string p = s + "/" + file;
    const std::string bytes = read_all(p);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const uint64_t m = text.size();
    std::string out(8, '\0');
    std::memcpy(&out[0], &m, 8);
    write_all(p, out + text + bytes.substr(8 + n));
  };
}
// One tensor's header entry: key ("dtype", "shape", "data_offsets") set to raw JSON.
inline Mutation st_entry(std::string file, std::string tensor, std::string key, std::string raw) {
  return st_header(file, [=](nlohmann::json& h) {
    REQUIRE(h.contains(tensor));
    if (raw.empty())
      h[tensor].erase(key);
    else
      h[tensor][key] = nlohmann::json::parse(raw);
  });
}

// --- running a case ---

inline std::string expand(std::string cmd, const std::string& scratch) {
  const std::pair<const char*, std::string> subs[] = {
      {"{M}", scratch + "/m"}, {"{O}", scratch + "/out"}, {"{S}", scratch}, {"{D}", std::string(DIT_TEST_DATA)}};
  for (const auto& [from, to] : subs)
    for (size_t at; (at = cmd.find(from)) != std::string::npos;) cmd.replace(at, std::strlen(from), to);
  return cmd;
}

// Every path under `dir` with its type and size (what a run must leave unchanged).
inline std::map<std::string, std::string> tree(const std::string& dir) {
  std::map<std::string, std::string> t;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::file_status st = it->symlink_status();
    std::string what = std::to_string(int(st.type()));
    if (st.type() == fs::file_type::regular) what += ":" + std::to_string(it->file_size());
    t[it->path().lexically_relative(dir).string()] = what;
  }
  return t;
}

inline void run_case(const Case& c) {
  Scratch s;
  if (!c.fixture.empty()) fs::copy(data_path(c.fixture), s.file("m"), fs::copy_options::recursive);
  fs::create_directory(s.file("out"));
  if (c.mutate) c.mutate(s.path());
  const auto before = tree(s.path());
  std::string cmd = expand(c.cmd, s.path());
  const std::string tool = cmd.substr(0, cmd.find(' '));
  const std::string rest = cmd.substr(tool.size());
  const bool batch = c.lines == 2;  // a batch run: the item's line, then the summary
  cmd = "timeout -k 5 60 " + bin(tool) + (tool == "dit-gen" ? " --progress none" : "") + rest;
  const RunResult r = run(cmd);
  INFO("case: " << c.name << "\ncommand: " << cmd << "\nexit: " << r.code << "\nstderr:\n" << r.err);
  CHECK(r.code != 0);                      // refused
  CHECK(r.code != 124);                    // not a hang (timeout's exit status)
  CHECK(r.code < 128);                     // not a crash (killed by a signal)
  CHECK(count_lines(r.err) == c.lines);    // one line (batch: the item's and the summary)
  const std::string first = r.err.substr(0, r.err.find('\n'));
  CHECK(first.find(batch ? "failed" : "error") != std::string::npos);
  const std::string needle = expand(c.needle, s.path());
  for (size_t b = 0, e; b <= needle.size(); b = e + 1) {  // "a|b": both named
    e = std::min(needle.find('|', b), needle.size());
    CHECK(first.find(needle.substr(b, e - b)) != std::string::npos);
  }
  // Nothing written, nothing left behind (a batch writes its results.jsonl only).
  auto after = tree(s.path());
  if (rest.find("--batch") != std::string::npos && !before.count("out/results.jsonl")) after.erase("out/results.jsonl");
  for (const auto& [path, what] : after) {
    INFO("left behind or changed: " << path);
    CHECK(path.find(".tmp") == std::string::npos);
    CHECK((before.count(path) && before.at(path) == what));
  }
  CHECK(after.size() == before.size());
}

}  // namespace dit_test::hostile
