// Hostile command lines: flags of every tool, prompts, batch lines, rendezvous strings,
// output paths and resource requests. See hostile_util.h.
#pragma once

#include <string>
#include <vector>

#include "hostile_cases_files.h"
#include "hostile_util.h"

namespace dit_test::hostile {

namespace cli {
const std::string G = "dit-gen -m {M} --steps 2 ";           // + the rest, on dit-tiny
const std::string P1 = "dit-gen -m {M} --steps 2 -p 1 ";      // dit-tiny, a valid prompt
const std::string O = " -o {O}/x.png";
const std::string BATCH = "dit-gen -m {M} --steps 2 --batch {S}/b.jsonl --output-dir {O}";
// A batch file of one line (and the run's two stderr lines: the item's error and the summary).
inline Case batch(std::string name, std::string line, std::string needle, std::string fixture = "dit-tiny") {
  return {name, fixture, put("b.jsonl", line + "\n"), BATCH, needle, 2};
}
// A prompt from a file (bytes a shell argument cannot hold literally).
inline Mutation prompt_file(std::string bytes) { return put("p.txt", bytes); }
}  // namespace cli

inline std::vector<Case> flag_cases() {
  using namespace cli;
  const std::string MK = "dit-make-model --out {O}/m ", BE = "dit-bench --preset tiny --steps 1 --warmup 0 ";
  const std::string EN = "dit-encode -m {M} -p fox ";
  return {
      {"--steps 0", "dit-tiny", {}, P1 + "--steps 0" + O, "--steps"},
      {"--steps -1", "dit-tiny", {}, P1 + "--steps -1" + O, "--steps"},
      {"--steps 1001", "dit-tiny", {}, P1 + "--steps 1001" + O, "--steps"},
      {"--steps abc", "dit-tiny", {}, P1 + "--steps abc" + O, "--steps"},
      {"--steps 1e3", "dit-tiny", {}, P1 + "--steps 1e3" + O, "--steps"},
      {"-W abc", "dit-tiny", {}, P1 + "-W abc" + O, "--width"},
      {"-W 0", "dit-tiny", {}, P1 + "-W 0" + O, "--width"},
      {"-W 99999999999", "dit-tiny", {}, P1 + "-W 99999999999" + O, "--width"},
      {"-H 17", "dit-tiny", {}, P1 + "-H 17" + O, "multiples of"},
      {"-g nan", "dit-tiny", {}, P1 + "-g nan" + O, "guidance"},
      {"-g abc", "dit-tiny", {}, P1 + "-g abc" + O, "--guidance-scale"},
      {"--dtype f64", "dit-tiny", {}, P1 + "--dtype f64" + O, "dtype"},
      {"--sampler bogus", "dit-tiny", {}, P1 + "--sampler bogus" + O, "bogus"},
      {"--progress bogus", "dit-tiny", {}, P1 + "--progress bogus" + O, "progress"},
      {"--ulysses-chunks 65", "dit-tiny", {}, P1 + "--ulysses 2 --ulysses-chunks 65" + O, "--ulysses-chunks"},
      {"--ulysses-chunks -1", "dit-tiny", {}, P1 + "--ulysses 2 --ulysses-chunks -1" + O, "--ulysses-chunks"},
      {"--timeout 0", "dit-tiny", {}, P1 + "--timeout 0" + O, "--timeout"},
      {"--timeout -1", "dit-tiny", {}, P1 + "--timeout -1" + O, "--timeout"},
      {"--timeout 1e9", "dit-tiny", {}, P1 + "--timeout 1e9" + O, "--timeout"},
      {"--timeout nan", "dit-tiny", {}, P1 + "--timeout nan" + O, "--timeout"},
      {"--micro-batch without --batch", "dit-tiny", {}, P1 + "--micro-batch 2" + O, "--micro-batch"},
      {"--dp without --batch", "dit-tiny", {}, P1 + "--dp 2" + O, "--dp"},
      {"--output-dir without --batch", "dit-tiny", {}, P1 + "--output-dir {O}/d", "--output-dir"},
      {"--batch without --output-dir", "dit-tiny", put("b.jsonl", "1\n"), G + "--batch {S}/b.jsonl", "--output-dir"},
      {"--batch missing file", "dit-tiny", {}, G + "--batch {S}/nope --output-dir {O}", "--batch"},
      {"--batch a directory", "dit-tiny", {}, G + "--batch {S} --output-dir {O}", "--batch"},
      {"-o with --batch", "dit-tiny", put("b.jsonl", "1\n"), BATCH + O, "-o/--output"},
      {"--no-decode with --batch", "dit-tiny", put("b.jsonl", "1\n"), BATCH + " --no-decode", "--no-decode"},
      {"--nnodes 0", "dit-tiny", {}, P1 + "--nnodes 0" + O, "--nnodes"},
      {"--nnodes 5000", "dit-tiny", {}, P1 + "--nnodes 5000" + O, "--nnodes"},
      {"--node-rank -1", "dit-tiny", {}, P1 + "--node-rank -1" + O, "--node-rank"},
      {"--tp 0", "dit-tiny", {}, P1 + "--tp 0" + O, "--tensor-parallel"},
      {"--tp 8 on 4 heads", "dit-tiny", {}, P1 + "--tp 8" + O, "--tensor-parallel 8"},
      {"--tp 3 with --ulysses 2", "dit-tiny", {}, P1 + "--tp 3 --ulysses 2" + O, "--ulysses 2"},
      {"--cfg-parallel -g 1", "dit-tiny", {}, P1 + "--cfg-parallel -g 1" + O, "--cfg-parallel"},
      {"-s abc", "dit-tiny", {}, P1 + "-s abc" + O, "--seed"},
      {"-s 1.5", "dit-tiny", {}, P1 + "-s 1.5" + O, "--seed"},
      {"-s '' ", "dit-tiny", {}, P1 + "-s ''" + O, "--seed"},
      {"--max-sequence-length 0", "pixart-tiny", {}, "dit-gen -m {M} -p fox --max-sequence-length 0" + O, "--max-sequence-length"},
      {"--max-sequence-length -1", "pixart-tiny", {}, "dit-gen -m {M} -p fox --max-sequence-length -1" + O,
       "--max-sequence-length"},
      {"--max-sequence-length on DiT", "dit-tiny", {}, P1 + "--max-sequence-length 0" + O, "--max-sequence-length"},
      {"-n on DiT", "dit-tiny", {}, P1 + "-n cat" + O, "--negative-prompt"},
      {"unknown flag", "dit-tiny", {}, P1 + "--frobnicate" + O, "--frobnicate"},
      {"-m missing", "", {}, "dit-gen -m {S}/nope -p 1" + O, "nope"},
      {"-m a file", "dit-tiny", {}, "dit-gen -m {M}/model_index.json -p 1" + O, "model_index.json"},
      {"-m empty", "", {}, "dit-gen -m '' -p 1" + O, "--model"},
      {"-m unknown demo name", "", {}, "dit-gen -m pixart-nope -p 1" + O, "pixart-nope"},
      {"make-model --preset bogus", "", {}, MK + "--preset bogus", "bogus"},
      {"make-model --out missing", "", {}, "dit-make-model --preset tiny", "--out"},
      {"make-model --shards 0", "", {}, MK + "--shards 0", "--shards"},
      {"make-model --shards -1", "", {}, MK + "--shards -1", "--shards"},
      {"make-model --shards 100000", "", {}, MK + "--shards 100000", "--shards"},
      {"make-model --layers -1", "", {}, MK + "--layers -1", "--layers"},
      {"make-model --dtype f64", "", {}, MK + "--dtype f64", "f64"},
      {"make-model --seed -1", "", {}, MK + "--seed -1", "--seed"},
      {"make-model --text-layers -1", "", {}, MK + "--preset pixart-demo --text-layers -1", "--text-layers"},
      {"make-model --text-shards 0", "", {}, MK + "--preset pixart-demo --text-shards 0", "--text-shards"},
      {"make-model --out a file", "", put("f", "x"), "dit-make-model --out {S}/f", "{S}/f"},
      {"make-model --out non-empty", "dit-tiny", {}, "dit-make-model --out {M}", "{M}"},
      {"bench --steps 0", "", {}, "dit-bench --preset tiny --steps 0", "--steps"},
      {"bench --warmup -1", "", {}, "dit-bench --preset tiny --warmup -1", "--warmup"},
      {"bench --size abc", "", {}, BE + "--size abc", "--size"},
      {"bench --size 0", "", {}, BE + "--size 0", "--size"},
      {"bench --layouts bogus", "", {}, BE + "--layouts bogus", "bogus"},
      {"bench --dtype f64", "", {}, BE + "--dtype f64", "f64"},
      {"bench --gemm 1,2", "", {}, BE + "--gemm 1,2", "--gemm"},
      {"bench --gemm -1,1,1", "", {}, BE + "--gemm -1,1,1", "--gemm"},
      {"bench --preset bogus", "", {}, "dit-bench --preset bogus", "bogus"},
      {"bench -m missing", "", {}, "dit-bench -m {S}/nope", "nope"},
      {"bench --threads 0", "", {}, BE + "-t 0", "--threads"},
      {"bench --guidance nan", "", {}, BE + "--guidance nan", "--guidance"},
      {"bench --qkv bogus", "", {}, BE + "--qkv bogus", "--qkv"},
      {"bench --gemm-runs 0", "", {}, BE + "--gemm-runs 0", "--gemm-runs"},
      {"encode --max-length 0", "pixart-tiny", {}, EN + "--ids --max-length 0", "--max-length"},
      {"encode --max-length 5000", "pixart-tiny", {}, EN + "--ids --max-length 5000", "--max-length"},
      {"encode -m missing", "", {}, "dit-encode -m {S}/nope -p fox --ids", "nope"},
      {"encode without -o or --ids", "pixart-tiny", {}, EN, "--output"},
      {"encode --dtype f64", "pixart-tiny", {}, EN + "--ids --dtype f64", "f64"},
      {"encode -t 0", "pixart-tiny", {}, EN + "--ids -t 0", "--threads"},
      {"encode on a DiT model", "dit-tiny", {}, EN + "--ids", "text_encoder"},
  };
}

inline std::vector<Case> prompt_cases() {
  using namespace cli;
  const std::string PF = "-p \"$(cat {S}/p.txt)\"";
  const std::string PX = "dit-gen -m {M} --steps 2 ";
  return {
      {"DiT prompt empty", "dit-tiny", {}, G + "-p ''" + O, "--prompt"},
      {"DiT prompt blank", "dit-tiny", {}, G + "-p ' '" + O, "--prompt"},
      {"DiT prompt of tabs and newlines", "dit-tiny", prompt_file("\t\n\t"), G + PF + O, "--prompt"},
      {"DiT prompt 100 KB", "dit-tiny", prompt_file(std::string(100000, 'a')), G + PF + O, "--prompt"},
      {"DiT prompt binary", "dit-tiny", prompt_file("\x01\x02\x03\x7f"), G + PF + O, "--prompt"},
      {"DiT prompt ESC sequence", "dit-tiny", prompt_file("\x1b[2J\x1b[31m"), G + PF + O, "--prompt"},
      {"DiT prompt CR", "dit-tiny", prompt_file("tench\rfake line"), G + PF + O, "--prompt"},
      {"DiT prompt invalid UTF-8", "dit-tiny", prompt_file("\xff\xfe"), G + PF + O, "--prompt"},
      {"DiT class 10 of 10", "dit-tiny", {}, G + "-p 10" + O, "out of range"},
      {"DiT class -1", "dit-tiny", {}, G + "-p -1" + O, "--prompt"},
      {"DiT class 1e3", "dit-tiny", {}, G + "-p 1e3" + O, "--prompt"},
      {"DiT class 2^64", "dit-tiny", {}, G + "-p 18446744073709551616" + O, "--prompt"},
      {"PixArt prompt invalid UTF-8", "pixart-tiny", prompt_file("fox \xff"), PX + PF + O, "UTF-8"},
      {"PixArt prompt truncated UTF-8", "pixart-tiny", prompt_file("fox \xc3"), PX + PF + O, "UTF-8"},
      {"PixArt prompt surrogate", "pixart-tiny", prompt_file("\xed\xa0\x80"), PX + PF + O, "UTF-8"},
      {"PixArt prompt overlong", "pixart-tiny", prompt_file("\xc0\x80"), PX + PF + O, "UTF-8"},
      {"PixArt prompt past U+10FFFF", "pixart-tiny", prompt_file("\xf4\x90\x80\x80"), PX + PF + O, "UTF-8"},
      {"PixArt negative prompt invalid", "pixart-tiny", prompt_file("\xff"), PX + "-p fox -n \"$(cat {S}/p.txt)\"" + O,
       "UTF-8"},
      {"dit-encode prompt invalid UTF-8", "pixart-tiny", prompt_file("\xfe"), "dit-encode -m {M} --ids " + PF, "UTF-8"},
  };
}

inline std::vector<Case> batch_cases() {
  using namespace cli;
  return {
      batch("bad JSON", "{\"prompt\": 1,", "malformed JSON"),
      batch("prompt null", "{\"prompt\": null}", "no prompt"),
      batch("no prompt", "{\"seed\": 1}", "no prompt"),
      batch("prompt empty", "{\"prompt\": \"\"}", "no prompt"),
      batch("prompt a list", "{\"prompt\": []}", "\"prompt\""),
      batch("prompt an object", "{\"prompt\": {}}", "\"prompt\""),
      batch("prompt true", "{\"prompt\": true}", "\"prompt\""),
      batch("prompt an unknown class", "{\"prompt\": \"zebra\"}", "zebra"),
      batch("seed -1", "{\"prompt\": 1, \"seed\": -1}", "\"seed\""),
      batch("seed a string", "{\"prompt\": 1, \"seed\": \"1\"}", "\"seed\""),
      batch("seed 1.5", "{\"prompt\": 1, \"seed\": 1.5}", "\"seed\""),
      batch("seed 2^64", "{\"prompt\": 1, \"seed\": 18446744073709551616}", "\"seed\""),
      batch("steps a string", "{\"prompt\": 1, \"steps\": \"x\"}", "\"steps\""),
      batch("steps 0", "{\"prompt\": 1, \"steps\": 0}", "steps"),
      batch("steps 1e12", "{\"prompt\": 1, \"steps\": 1e12}", "\"steps\""),
      batch("steps 2.5", "{\"prompt\": 1, \"steps\": 2.5}", "\"steps\""),
      batch("width 1000000", "{\"prompt\": 1, \"width\": 1000000}", "1000000"),
      batch("width -16", "{\"prompt\": 1, \"width\": -16}", "-16"),
      batch("width a string", "{\"prompt\": 1, \"width\": \"wide\"}", "\"width\""),
      batch("height 17", "{\"prompt\": 1, \"height\": 17}", "multiples of"),
      batch("guidance a string", "{\"prompt\": 1, \"guidance_scale\": \"x\"}", "\"guidance_scale\""),
      batch("sampler a number", "{\"prompt\": 1, \"sampler\": 3}", "\"sampler\""),
      batch("sampler unknown", "{\"prompt\": 1, \"sampler\": \"lms\"}", "lms"),
      batch("output absolute", "{\"prompt\": 1, \"output\": \"/tmp/x.png\"}", "absolute"),
      batch("output escapes", "{\"prompt\": 1, \"output\": \"a/../../x.png\"}", "escapes"),
      batch("output empty", "{\"prompt\": 1, \"output\": \"\"}", "\"output\""),
      batch("output results.jsonl", "{\"prompt\": 1, \"output\": \"results.jsonl\"}", "results.jsonl"),
      batch("output a directory", "{\"prompt\": 1, \"output\": \"a/\"}", "not a file path"),
      batch("unknown key", "{\"prompt\": 1, \"widht\": 16}", "widht"),
      batch("nested 100 deep", "{\"prompt\": 1, \"x\": " + std::string(100, '[') + std::string(100, ']') + "}",
            "nested"),
      batch("NaN guidance", "{\"prompt\": 1, \"guidance_scale\": NaN}", "malformed JSON"),
      batch("prompt 1 MiB", "{\"prompt\": \"" + std::string(1 << 20, 'a') + "\"}", "prompt"),
      batch("binary line", std::string("{\"prompt\": \"\x01\x1b[2J\xff\"}"), "malformed JSON"),
      batch("text line of ESC", "\x1b[2J\x1b[31m", "prompt"),
      batch("resolution_binning a string", "{\"prompt\": \"fox\", \"resolution_binning\": \"yes\"}",
            "\"resolution_binning\"", "pixart-tiny"),
      batch("max_sequence_length 0", "{\"prompt\": \"fox\", \"max_sequence_length\": 0}", "max_sequence_length",
            "pixart-tiny"),
      batch("negative_prompt a number", "{\"prompt\": \"fox\", \"negative_prompt\": 5}", "\"negative_prompt\"",
            "pixart-tiny"),
      batch("PixArt prompt invalid UTF-8", "fox \xff", "UTF-8", "pixart-tiny"),
      batch("negative_prompt on DiT", "{\"prompt\": 1, \"negative_prompt\": \"x\"}", "negative"),
  };
}

inline std::vector<Case> rendezvous_cases() {
  using namespace cli;
  const std::string R = P1 + "--ulysses 2" + O + " --rendezvous ";
  return {
      {"rendezvous without a scheme", "dit-tiny", {}, R + "bogus", "rendezvous"},
      {"rendezvous tcp://", "dit-tiny", {}, R + "tcp://h:1", "rendezvous"},
      {"rendezvous file: empty", "dit-tiny", {}, R + "file:", "rendezvous"},
      {"rendezvous redis:// empty", "dit-tiny", {}, R + "redis://", "rendezvous"},
      {"rendezvous redis port 0", "dit-tiny", {}, R + "redis://h:0", "rendezvous"},
      {"rendezvous redis port 99999", "dit-tiny", {}, R + "redis://h:99999", "rendezvous"},
      {"rendezvous redis port abc", "dit-tiny", {}, R + "redis://h:abc", "rendezvous"},
      {"rendezvous redis no host", "dit-tiny", {}, R + "redis://:6379", "rendezvous"},
      {"rendezvous redis port -1", "dit-tiny", {}, R + "redis://h:-1", "rendezvous"},
      {"rendezvous empty", "dit-tiny", {}, R + "''", "rendezvous"},
      {"rendezvous file: under a file", "dit-tiny", {}, R + "file:/dev/null/x", "/dev/null/x"},
      {"rendezvous with a control char", "dit-tiny", {}, R + "\"$(printf 'file:\\033[2J')\"", "rendezvous"},
  };
}

inline std::vector<Case> output_cases() {
  using namespace cli;
  return {
      {"-o a directory", "dit-tiny", {}, P1 + "-o {O}", "--output"},
      {"-o /dev/null", "dit-tiny", {}, P1 + "-o /dev/null", "/dev/null"},
      {"-o a FIFO", "dit-tiny", make_fifo("out/f.png"), P1 + "-o {O}/f.png", "f.png"},
      {"-o missing parent", "dit-tiny", {}, P1 + "-o {O}/no/such/x.png", "--output"},
      {"-o empty", "dit-tiny", {}, P1 + "-o ''", "--output"},
      {"-o under a file", "dit-tiny", put("out/f", "x"), P1 + "-o {O}/f/x.png", "--output"},
      {"-o in a read-only place", "dit-tiny", {}, P1 + "-o /proc/x.png", "/proc"},
      {"-o a symlink to /dev/null", "dit-tiny", make_symlink("out/l.png", "/dev/null"), P1 + "-o {O}/l.png", "l.png"},
      {"-o trailing slash", "dit-tiny", {}, P1 + "-o {O}/x/", "--output"},
      // PNG bytes under another image format's name, or none (they used to be written there).
      {"-o x.jpg", "dit-tiny", {}, P1 + "-o {O}/x.jpg", "does not end in .png"},
      {"-o without an extension", "dit-tiny", {}, P1 + "-o {O}/x", "does not end in .png"},
      {"--save-latents x.txt", "dit-tiny", {}, P1 + O + " --save-latents {O}/l.txt", "does not end in .npy"},
      {"-o with --no-decode", "dit-tiny", {}, P1 + O + " --no-decode", "--no-decode"},
      {"--save-latents and --save-noise-pred one file", "dit-tiny", {},
       P1 + O + " --save-latents {O}/a.npy --save-noise-pred {O}/../out/a.npy", "name the same file"},
      {"--save-latents a directory", "dit-tiny", {}, P1 + O + " --save-latents {O}", "--save-latents"},
      {"--save-latents a FIFO", "dit-tiny", make_fifo("out/f.npy"), P1 + O + " --save-latents {O}/f.npy", "f.npy"},
      {"--save-noise-pred missing parent", "dit-tiny", {}, P1 + O + " --save-noise-pred {O}/no/n.npy",
       "--save-noise-pred"},
      {"--output-dir a file", "dit-tiny", both(put("b.jsonl", "1\n"), put("f", "x")),
       G + "--batch {S}/b.jsonl --output-dir {S}/f", "--output-dir"},
      {"--output-dir under /dev/null", "dit-tiny", put("b.jsonl", "1\n"), G + "--batch {S}/b.jsonl --output-dir /dev/null/o",
       "--output-dir"},
      {"results.jsonl a directory", "dit-tiny", both(put("b.jsonl", "1\n"), make_dir("out/results.jsonl")), BATCH,
       "results.jsonl"},
      {"results.jsonl a FIFO", "dit-tiny", both(put("b.jsonl", "1\n"), make_fifo("out/results.jsonl")), BATCH,
       "results.jsonl"},
      {"batch item output is a FIFO", "dit-tiny",
       both(put("b.jsonl", "{\"prompt\": 1, \"output\": \"f.png\"}\n"), make_fifo("out/f.png")), BATCH, "f.png", 2},
      {"batch item output x.jpg", "dit-tiny", put("b.jsonl", "{\"prompt\": 1, \"output\": \"x.jpg\"}\n"), BATCH,
       "does not end in .png", 2},
      {"batch item output under a symlink out", "dit-tiny",
       both(put("b.jsonl", "{\"prompt\": 1, \"output\": \"l/x.png\"}\n"), make_symlink("out/l", "/tmp")), BATCH,
       "outside --output-dir", 2},
      {"dit-encode -o a directory", "pixart-tiny", {}, "dit-encode -m {M} -p fox -o {O}", "{O}"},
      {"dit-encode -o /dev/null", "pixart-tiny", {}, "dit-encode -m {M} -p fox -o /dev/null", "/dev/null"},
      {"dit-encode -o x.txt", "pixart-tiny", {}, "dit-encode -m {M} -p fox -o {O}/e.txt", "does not end in .npy"},
      {"dit-encode -o missing parent", "pixart-tiny", {}, "dit-encode -m {M} -p fox -o {O}/no/e.npy", "{O}/no"},
      {"dit-bench -o missing parent", "", {}, "dit-bench --preset tiny --steps 1 -o {O}/no/b.json", "{O}/no"},
      {"dit-make-model --out /dev/null", "", {}, "dit-make-model --preset tiny --out /dev/null", "/dev/null"},
  };
}

inline std::vector<Case> resource_cases() {
  using namespace cli;
  return {
      {"--ulysses 1000", "dit-tiny", {}, P1 + "--ulysses 1000" + O, "--ulysses"},
      {"--ring 1000", "dit-tiny", {}, P1 + "--ring 1000" + O, "too many"},
      {"--ulysses 2000", "dit-tiny", {}, P1 + "--ulysses 2000" + O, "--ulysses"},
      {"--tp 2000", "dit-tiny", {}, P1 + "--tp 2000" + O, "--tensor-parallel"},
      {"-t 100000", "dit-tiny", {}, P1 + "-t 100000" + O, "--threads"},
      {"-t -3", "dit-tiny", {}, P1 + "-t -3" + O, "--threads"},
      {"--nproc-per-node 5000", "dit-tiny", {}, P1 + "--nproc-per-node 5000" + O, "--nproc-per-node"},
      {"--dp 1024 batch", "dit-tiny", put("b.jsonl", "1\n"), BATCH + " --dp 1024", "too many"},
      {"--micro-batch 100000", "dit-tiny", put("b.jsonl", "1\n"), BATCH + " --micro-batch 100000", "--micro-batch"},
      {"--dp x cfg x ring too large", "dit-tiny", put("b.jsonl", "1\n"), BATCH + " --dp 64 --ring 64", "too large"},
      {"8192 x 8192 image", "dit-tiny", {}, P1 + "-W 8192 -H 8192" + O, "16 Mpx"},
      {"--max-sequence-length 4097", "pixart-tiny", {}, "dit-gen -m {M} -p fox --max-sequence-length 4097" + O,
       "sequence length"},
      {"dit-bench --size 100000", "", {}, "dit-bench --preset tiny --steps 1 --size 100000", "--size"},
      {"dit-bench --steps 10^9", "", {}, "dit-bench --preset tiny --steps 1000000000", "--steps"},
      {"dit-bench --layers 10^6", "", {}, "dit-bench --preset tiny --layers 1000000", "--layers"},
      {"dit-bench -t 100000", "", {}, "dit-bench --preset tiny --steps 1 -t 100000", "--threads"},
      {"dit-bench --layouts u1000", "", {}, "dit-bench --preset tiny --steps 1 --layouts u1000", "u1000"},
      {"dit-make-model --layers 10^6", "", {}, "dit-make-model --preset tiny --layers 1000000 --out {O}/m", "--layers"},
      {"dit-encode -t 100000", "pixart-tiny", {}, "dit-encode -m {M} -p fox --ids -t 100000", "--threads"},
  };
}

}  // namespace dit_test::hostile
