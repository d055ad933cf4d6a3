// dit-gen --batch end to end, as a user runs it: text and JSONL batches, resume, bad items,
// path escapes, --dp and --micro-batch giving the same images, the JSON progress stream.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_util.h"
#include "runtime/npy.h"
#include "runtime/png.h"

using namespace dit_test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kTiny = " -m " + data_path("dit-tiny");
std::string batch(const std::string& args) { return bin("dit-gen") + kTiny + " -t 1 " + args; }

// results.jsonl: index -> its last record.
std::map<int, json> results(const std::string& dir) {
  std::map<int, json> m;
  std::istringstream is(slurp(dir + "/results.jsonl"));
  for (std::string l; std::getline(is, l);) {
    const json j = json::parse(l);
    m[j.at("index").get<int>()] = j;
  }
  return m;
}

int64_t mtime_ns(const std::string& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

const char* kPrompts =
    "# fish first\n"
    "tench\n"
    "\n"
    "goldfish\n"
    "great white shark\n"
    "4\n"
    "ostrich\n";

}  // namespace

TEST_CASE("batch: a text file gives one PNG per prompt, seeds --seed + index, and results.jsonl", "[cli][batch]") {
  Scratch s;
  write_text(s.file("p.txt"), kPrompts);
  const std::string out = s.file("out");
  RunResult r = run(batch("--batch " + s.file("p.txt") + " --output-dir " + out + " --steps 2 -s 10 --progress none"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const char* names[] = {"00000-tench.png", "00001-goldfish.png", "00002-great-white-shark.png", "00003-4.png",
                         "00004-ostrich.png"};
  for (int i = 0; i < 5; ++i) {
    const std::string p = out + "/" + names[i];
    REQUIRE(fs::exists(p));
    const std::string params = dit::read_png_text(p, "parameters");
    CHECK(params.find("Seed: " + std::to_string(10 + i) + ",") != std::string::npos);
    CHECK(params.find("Steps: 2,") != std::string::npos);
  }
  auto res = results(out);
  REQUIRE(res.size() == 5);
  CHECK(res[0]["status"] == "done");
  CHECK(res[0]["class_id"] == 0);
  CHECK(res[0]["label"] == "tench, Tinca tinca");
  CHECK(res[2]["class_id"] == 2);
  CHECK(res[3]["class_id"] == 4);
  CHECK(res[4]["seed"] == 14);
  CHECK(res[4]["output"] == out + "/00004-ostrich.png");
  CHECK(r.err.find("5 items: 5 generated, 0 skipped, 0 failed") != std::string::npos);

  // The same prompt and seed as a single-image run gives the same file.
  REQUIRE(run(bin("dit-gen") + kTiny + " -t 1 --progress none -p goldfish -s 11 --steps 2 -o " + s.file("one.png"))
              .code == 0);
  CHECK(slurp(s.file("one.png")) == slurp(out + "/00001-goldfish.png"));
}

TEST_CASE("batch: JSONL keys override the command line - standard input", "[cli][batch]") {
  Scratch s;
  const std::string out = s.file("out");
  write_text(s.file("b.jsonl"),
        "{\"prompt\": \"tiger shark\", \"seed\": 7, \"steps\": 3, \"output\": \"sharks/tiger.png\"}\n"
        "{\"prompt\": 1, \"width\": 32, \"height\": 16, \"sampler\": \"euler\", \"guidance_scale\": 1.5}\n"
        "{\"seed\": 9}\n");
  RunResult r = run("(cat " + s.file("b.jsonl") + " | " +
                    batch("--batch - --output-dir " + out + " --steps 2 -p ostrich --progress none") + ")");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string a = dit::read_png_text(out + "/sharks/tiger.png", "parameters");
  CHECK(a.rfind("tiger shark\nSteps: 3, Sampler: ddim, CFG scale: 4, Seed: 7,", 0) == 0);
  const std::string b = dit::read_png_text(out + "/00001-1.png", "parameters");
  CHECK(b.rfind("1\nSteps: 2, Sampler: euler, CFG scale: 1.5, Seed: 43, Size: 32x16,", 0) == 0);
  const std::string c = dit::read_png_text(out + "/00002-ostrich.png", "parameters");  // --prompt as default
  CHECK(c.find("Seed: 9,") != std::string::npos);
  CHECK(results(out).size() == 3);
}

TEST_CASE("batch: resume skips finished items and generates the rest", "[cli][batch]") {
  Scratch s;
  const std::string out = s.file("out");
  write_text(s.file("p.txt"), kPrompts);
  // A batch "killed" after two items: the first two lines done by a shorter batch.
  write_text(s.file("first.txt"), "tench\ngoldfish\n");
  REQUIRE(run(batch("--batch " + s.file("first.txt") + " --output-dir " + out + " --steps 2 --progress none")).code ==
          0);
  const std::string done0 = out + "/00000-tench.png", done1 = out + "/00001-goldfish.png";
  const int64_t t0 = mtime_ns(done0), t1 = mtime_ns(done1);
  const std::string bytes0 = slurp(done0);
  // A stale output from other settings (other steps) is regenerated, not skipped.
  REQUIRE(run(bin("dit-gen") + kTiny + " -t 1 --progress none -p 4 -s 45 --steps 3 -o " + out + "/00003-4.png").code ==
          0);
  fs::remove(s.file("out/results.jsonl"));

  RunResult r = run(batch("--batch " + s.file("p.txt") + " --output-dir " + out + " --steps 2 --progress json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto res = results(out);
  REQUIRE(res.size() == 5);
  CHECK(res[0]["status"] == "skipped");
  CHECK(res[1]["status"] == "skipped");
  CHECK(res[2]["status"] == "done");
  CHECK(res[3]["status"] == "done");
  CHECK(res[4]["status"] == "done");
  CHECK(mtime_ns(done0) == t0);
  CHECK(mtime_ns(done1) == t1);
  CHECK(slurp(done0) == bytes0);
  CHECK(dit::read_png_text(out + "/00003-4.png", "parameters").find("Steps: 2,") != std::string::npos);
  CHECK(r.err.find("5 items: 3 generated, 2 skipped, 0 failed") != std::string::npos);

  // Everything is there now; --overwrite regenerates anyway (same bytes: same parameters).
  r = run(batch("--batch " + s.file("p.txt") + " --output-dir " + out + " --steps 2 --progress none"));
  CHECK(r.err.find("0 generated, 5 skipped") != std::string::npos);
  r = run(batch("--batch " + s.file("p.txt") + " --output-dir " + out + " --steps 2 --overwrite --progress none"));
  CHECK(r.err.find("5 generated, 0 skipped") != std::string::npos);
  CHECK(mtime_ns(done0) != t0);
  CHECK(slurp(done0) == bytes0);
}

TEST_CASE("batch: a killed batch finishes the rest when run again", "[cli][batch]") {
  Scratch s;
  const std::string out = s.file("out");
  std::string prompts;
  const int n = 40;  // about 40 ms each at 100 steps: the kill lands well before the end
  for (int i = 0; i < n; ++i) prompts += std::to_string(i % 10) + "\n";
  write_text(s.file("p.txt"), prompts);
  // Kill the run (SIGKILL, nothing cleaned up) as soon as the first item is reported done.
  const std::string cmd = batch("--batch " + s.file("p.txt") + " --output-dir " + out + " --steps 100 --progress json");
  run("sh -c '" + cmd + " 2> " + s.file("ev") + " & pid=$!; i=0; while ! grep -q item_done " + s.file("ev") +
      " && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; kill -9 $pid; wait $pid'");
  auto first = results(out);
  REQUIRE(first.size() >= 1);
  REQUIRE(first.size() < size_t(n));  // killed midway
  std::map<int, int64_t> mt;
  for (auto& [i, j] : first) mt[i] = mtime_ns(j["output"].get<std::string>());
  // The kill may land between an item's PNG (renamed into place, complete) and its record:
  // that item is skipped too when the batch runs again.
  size_t pngs_after_kill = 0;
  for (const auto& e : fs::directory_iterator(out)) pngs_after_kill += e.path().extension() == ".png";
  REQUIRE(pngs_after_kill >= mt.size());

  RunResult r = run(cmd);
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto res = results(out);
  REQUIRE(res.size() == size_t(n));
  // The killed run's items are skipped, not generated again, and not recorded again: their
  // record is still the first run's "done" (a batch resumed many times must not grow).
  for (auto& [i, t] : mt) {
    CHECK(res[i]["status"] == "done");
    CHECK(mtime_ns(res[i]["output"].get<std::string>()) == t);
  }
  for (int i = 0; i < n; ++i) CHECK(fs::exists(res[i]["output"].get<std::string>()));
  const size_t skipped = pngs_after_kill;
  CHECK(r.err.find(std::to_string(n - skipped) + " generated, " + std::to_string(skipped) + " skipped") !=
        std::string::npos);
  // Every line is one valid record (a line torn by the kill got its newline), one per item.
  size_t records = 0;
  std::istringstream lines(slurp(out + "/results.jsonl"));
  for (std::string l; std::getline(lines, l);) records += nlohmann::json::accept(l);
  CHECK(records == size_t(n));
  // A third run records nothing new.
  REQUIRE(run(cmd).code == 0);
  CHECK(results(out).size() == size_t(n));
  size_t again = 0;
  std::istringstream lines2(slurp(out + "/results.jsonl"));
  for (std::string l; std::getline(lines2, l);) again += nlohmann::json::accept(l);
  CHECK(again == size_t(n));
  int pngs = 0, temps = 0;  // the killed run's half-written temporary files are gone after the resume
  for (auto& e : fs::directory_iterator(out)) {
    pngs += e.path().extension() == ".png";
    temps += e.path().filename().string().find(".dit-tmp.") != std::string::npos;
  }
  CHECK(pngs == n);
  CHECK(temps == 0);
}

TEST_CASE("batch: bad items are recorded as failed and the batch goes on", "[cli][batch]") {
  Scratch s;
  const std::string out = s.file("out");
  write_text(s.file("b.jsonl"),
        "{\"prompt\": \"tench\"}\n"
        "{\"prompt\": \"zebra\"}\n"
        "{this is not json\n"
        "{\"prompt\": \"goldfish\", \"width\": 17}\n"
        "{\"prompt\": \"goldfish\", \"stepz\": 3}\n"
        "{\"prompt\": \"hen\", \"output\": \"../escape.png\"}\n"
        "{\"prompt\": \"hen\", \"output\": \"/tmp/dit-batch-escape.png\"}\n"
        "{\"prompt\": \"hen\", \"output\": \"a/../../escape.png\"}\n"
        "{\"prompt\": \"ostrich\"}\n");
  RunResult r = run(batch("--batch " + s.file("b.jsonl") + " --output-dir " + out + " --steps 2 --progress none"));
  INFO(r.err);
  CHECK(r.code != 0);
  auto res = results(out);
  REQUIRE(res.size() == 9);
  CHECK(res[0]["status"] == "done");
  CHECK(res[8]["status"] == "done");
  for (int i = 1; i <= 7; ++i) {
    INFO(res[i].dump());
    CHECK(res[i]["status"] == "failed");
    CHECK(res[i]["error"].get<std::string>().find("line " + std::to_string(i + 1) + ":") == 0);
  }
  CHECK(res[1]["error"].get<std::string>().find("zebra") != std::string::npos);
  CHECK(res[2]["error"].get<std::string>().find("malformed JSON") != std::string::npos);
  CHECK(res[3]["error"].get<std::string>().find("multiples of") != std::string::npos);
  CHECK(res[4]["error"].get<std::string>().find("stepz") != std::string::npos);
  // The keys it could have been, every one of them (listed from the table that applies them).
  CHECK(res[4]["error"].get<std::string>().find("(expected prompt, negative_prompt, seed, steps, guidance_scale, sampler, "
                                               "width, height, max_sequence_length, resolution_binning, output)") !=
        std::string::npos);
  for (int i = 5; i <= 7; ++i) CHECK(res[i]["error"].get<std::string>().find("--output-dir") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path() + "/escape.png"));
  CHECK_FALSE(fs::exists("/tmp/dit-batch-escape.png"));
  CHECK(r.err.find("9 items: 2 generated, 0 skipped, 7 failed") != std::string::npos);
  CHECK(r.err.find("item 1 failed") != std::string::npos);
}

TEST_CASE("batch: a symbolic link inside --output-dir cannot lead an output out of it", "[cli][batch]") {
  Scratch s;
  const std::string out = s.file("out"), outside = s.file("outside");
  fs::create_directories(out);
  fs::create_directories(outside);
  fs::create_directory_symlink(outside, out + "/link");
  write_text(s.file("b.jsonl"),
        "{\"prompt\": \"tench\", \"output\": \"link/x.png\"}\n"
        "{\"prompt\": \"tench\", \"output\": \"sub/y.png\"}\n");
  RunResult r = run(batch("--batch " + s.file("b.jsonl") + " --output-dir " + out + " --steps 2 --progress none"));
  INFO(r.err);
  CHECK(r.code != 0);
  auto res = results(out);
  REQUIRE(res.size() == 2);
  CHECK(res[0]["status"] == "failed");
  CHECK(res[0]["error"].get<std::string>().find("outside --output-dir") != std::string::npos);
  CHECK(res[1]["status"] == "done");
  CHECK(fs::is_empty(outside));
  CHECK(fs::exists(out + "/sub/y.png"));
}

// max |a - b| / max |b| of two latents files (infinite if any difference is NaN).
static double latents_rel_diff(const std::string& got, const std::string& want) {
  const dit::Tensor a = dit::read_npy(got), b = dit::read_npy(want);
  REQUIRE(a.numel() == b.numel());
  double m = 0, ref = 0;
  for (int64_t k = 0; k < a.numel(); ++k) {
    const double dk = std::fabs(double(a.f32()[k]) - double(b.f32()[k]));
    m = std::isnan(dk) ? INFINITY : std::max(m, dk);
    ref = std::max(ref, double(std::fabs(b.f32()[k])));
  }
  return m / ref;
}

TEST_CASE("batch: --dp 2 and --micro-batch give the same files as one replica one at a time", "[cli][batch]") {
  Scratch s;
  std::string prompts;
  for (int i = 0; i < 7; ++i) prompts += std::to_string(i % 10) + "\n";
  write_text(s.file("p.txt"), prompts);
  auto go = [&](const std::string& dir, const std::string& flags) {
    RunResult r = run(batch("--batch " + s.file("p.txt") + " --output-dir " + s.file(dir) +
                            " --steps 3 --save-item-latents --progress none " + flags));
    INFO(flags << "\n" << r.err);
    REQUIRE(r.code == 0);
    CHECK(results(s.file(dir)).size() == 7);
  };
  go("ref", "");
  go("dp2", "--dp 2");
  go("mb2", "--micro-batch 2");
  go("mb3dp2", "--micro-batch 3 --dp 2 --cfg-parallel");
  go("dp2u2", "--dp 2 --ulysses 2 --micro-batch 2");
  go("dp2r2", "--dp 2 --ring 2");
  go("dp2tp2", "--dp 2 --tp 2 --micro-batch 2");
  for (int i = 0; i < 7; ++i) {
    const std::string name = "0000" + std::to_string(i) + "-" + std::to_string(i % 10);
    const std::string png = slurp(s.file("ref/" + name + ".png")), npy = slurp(s.file("ref/" + name + ".npy"));
    REQUIRE(!png.empty());
    REQUIRE(!npy.empty());
    // Replicas run the same arithmetic as one process: bit for bit.
    INFO("dp2 " << name);
    CHECK(slurp(s.file("dp2/" + name + ".png")) == png);
    CHECK(slurp(s.file("dp2/" + name + ".npy")) == npy);
    // Micro-batches run the matmuls over more rows: bit for bit where oneDNN's kernels do not
    // depend on the row count (AVX-512), within rounding where they do (AVX2); the PNGs agree.
    for (const char* d : {"mb2", "mb3dp2"}) {
      INFO(d << " " << name);
      CHECK(slurp(s.file(std::string(d) + "/" + name + ".png")) == png);
      CHECK(latents_rel_diff(s.file(std::string(d) + "/" + name + ".npy"), s.file("ref/" + name + ".npy")) <= 1e-5);
    }
    // Sequence or tensor parallel inside the replicas: the parallel-equivalence tolerance
    // (ring attention merges by log-sum-exp, row-parallel layers sum partial products, so the
    // latents may differ in the last bits).
    for (const char* d : {"dp2u2", "dp2r2", "dp2tp2"}) {
      INFO(d << " " << name);
      CHECK(latents_rel_diff(s.file(std::string(d) + "/" + name + ".npy"), s.file("ref/" + name + ".npy")) <= 1e-4);
    }
  }
}

TEST_CASE("batch: same-size items run together wherever they stand in the file, with or without --micro-batch",
          "[cli][batch]") {
  Scratch s;
  // Sizes alternate: items 0 and 2 are 16x16, 1 and 3 are 32x16.
  write_text(s.file("b.jsonl"),
        "{\"prompt\": \"tench\"}\n"
        "{\"prompt\": \"goldfish\", \"width\": 32}\n"
        "{\"prompt\": \"hen\"}\n"
        "{\"prompt\": \"ostrich\", \"width\": 32}\n");
  auto go = [&](const std::string& dir, const std::string& flags) {
    RunResult r = run(batch("--batch " + s.file("b.jsonl") + " --output-dir " + s.file(dir) +
                            " --steps 2 --save-item-latents --progress json " + flags));
    INFO(flags << "\n" << r.err);
    REQUIRE(r.code == 0);
    std::vector<int> order;  // item index of each step event
    std::istringstream is(r.err);
    for (std::string l; std::getline(is, l);)
      if (l.rfind("{\"event\":\"step\"", 0) == 0) order.push_back(json::parse(l).at("index").get<int>());
    return order;
  };
  // One at a time, size by size (a change of size sets the pipeline up again): 0, 2, then 1, 3.
  CHECK(go("one", "") == std::vector<int>{0, 0, 2, 2, 1, 1, 3, 3});
  // Two micro-batches, {0, 2} then {1, 3}: each step reports both items of its batch.
  CHECK(go("mb", "--micro-batch 2") == std::vector<int>{0, 2, 0, 2, 1, 3, 1, 3});
  for (const char* name : {"00000-tench", "00001-goldfish", "00002-hen", "00003-ostrich"}) {
    INFO(name);
    const std::string ref = slurp(s.file(std::string("one/") + name + ".npy"));
    REQUIRE(!ref.empty());
    // bit for bit on AVX-512, within rounding on AVX2 (see above)
    CHECK(latents_rel_diff(s.file(std::string("mb/") + name + ".npy"), s.file(std::string("one/") + name + ".npy")) <=
          1e-5);
    CHECK(slurp(s.file(std::string("mb/") + name + ".png")) == slurp(s.file(std::string("one/") + name + ".png")));
  }
}

TEST_CASE("batch: the JSON progress stream parses and counts every step", "[cli][batch]") {
  Scratch s;
  write_text(s.file("p.txt"), kPrompts);
  for (const char* flags : {"", "--micro-batch 2", "--dp 2", "--dp 2 --micro-batch 2"}) {
    INFO(flags);
    RunResult r = run(batch("--batch " + s.file("p.txt") + " --output-dir " + s.file("out") +
                            " --steps 3 --overwrite --progress json " + flags));
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::map<std::string, int> count;
    std::map<int, std::vector<int>> steps_of;  // item index -> its step numbers, in order
    std::map<int, int> replica_of, done_at;    // item index -> replica; -> event number of its item_done
    std::istringstream is(r.err);
    json last;
    int events = 0;
    for (std::string l; std::getline(is, l);) {
      if (l.empty() || l[0] != '{') continue;
      json j;
      REQUIRE_NOTHROW(j = json::parse(l));
      const std::string ev = j.at("event").get<std::string>();
      count[ev]++;
      ++events;
      if (ev == "step") {
        const int i = j.at("index").get<int>();
        CHECK_FALSE(done_at.count(i));  // every step comes before the item's item_done
        steps_of[i].push_back(j.at("step").get<int>());
        CHECK(j.at("total") == 3);
        replica_of[i] = j.at("replica").get<int>();
      }
      if (ev == "item_done") done_at[j.at("index").get<int>()] = events;
      last = j;
    }
    CHECK(count["batch_start"] == 1);
    CHECK(count["step"] == 5 * 3);
    CHECK(steps_of.size() == 5);
    for (const auto& [i, steps] : steps_of) {
      INFO("item " << i);
      CHECK(steps == std::vector<int>{1, 2, 3});
      // --dp 2: items go round-robin, so item i is replica i % 2's.
      CHECK(replica_of[i] == (std::string(flags).find("--dp 2") != std::string::npos ? i % 2 : 0));
    }
    CHECK(count["item_done"] == 5);
    CHECK(count["batch_done"] == 1);
    CHECK(last["event"] == "batch_done");
    CHECK(last["generated"] == 5);
  }
}

TEST_CASE("batch: flag errors", "[cli][batch]") {
  Scratch s;
  write_text(s.file("p.txt"), "tench\n");
  auto fails = [&](const std::string& args, const std::string& needle) {
    RunResult r = run(batch(args));
    INFO(args << "\n" << r.err);
    CHECK(r.code != 0);
    CHECK(r.err.find(needle) != std::string::npos);
  };
  fails("--batch " + s.file("p.txt"), "--output-dir");
  fails("--batch " + s.file("nope.txt") + " --output-dir " + s.file("o"), "nope.txt");
  fails("--batch " + s.file("p.txt") + " --output-dir " + s.file("o") + " -o x.png", "-o");
  fails("--batch " + s.file("p.txt") + " --output-dir " + s.file("o") + " --dp 0", "--dp");
  fails("--batch " + s.file("p.txt") + " --output-dir " + s.file("o") + " --micro-batch 0", "--micro-batch");
  fails("-p 1 --dp 2", "batch mode");
  CHECK_FALSE(fs::exists(s.file("o")));
}

TEST_CASE("batch: a results.jsonl torn by a kill is mended before new records", "[cli][batch]") {
  Scratch s;
  const std::string out = s.file("out");
  fs::create_directories(out);
  write_text(out + "/results.jsonl", "{\"index\":0,\"prompt\":\"1\",\"seed\":4");  // no newline: a torn write
  write_text(s.file("p.txt"), "1\n2\n");
  RunResult r = run(batch("--batch " + s.file("p.txt") + " --output-dir " + out + " --steps 2"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::istringstream lines(slurp(out + "/results.jsonl"));
  std::vector<std::string> all;
  for (std::string l; std::getline(lines, l);) all.push_back(l);
  REQUIRE(all.size() == 3);
  CHECK_FALSE(json::accept(all[0]));  // the torn line stays as it was, on its own line
  CHECK(json::accept(all[1]));
  CHECK(json::accept(all[2]));
}
