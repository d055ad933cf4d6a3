#include "tools/bench/bench.h"

#include <algorithm>
#include <regex>
#include <sstream>

#include "runtime/error.h"

namespace dit::bench {

Layout parse_layout(const std::string& s) {
  Layout l;
  l.name = s;
  if (s == "serial") return l;
  if (s == "serial-each") {
    l.every_node = true;
    return l;
  }
  if (s == "serial-all") {
    l.all_cores = true;
    return l;
  }
  std::regex part("(cfg|tp|u|r)([0-9]+)");
  std::string rest = s;
  std::smatch m;
  bool any = false;
  while (!rest.empty()) {
    DIT_CHECK(std::regex_search(rest, m, part) && m.position(0) == 0,
              "layout '" << s << "': expected serial, serial-all, serial-each or a combination of cfgN, uN, rN, tpN (e.g. cfg2u2, u2r2, tp2)");
    DIT_CHECK(m[2].length() <= 4, "layout '" << s << "': degree " << m[2].str() << " is too large");
    const int n = std::stoi(m[2].str());
    DIT_CHECK(n >= 1, "layout '" << s << "': degree must be >= 1");
    if (m[1] == "cfg") {
      DIT_CHECK(n <= 2, "layout '" << s << "': the CFG degree is 1 or 2");
      l.deg[Axis::Cfg] = n;
    } else if (m[1] == "tp") {
      l.deg[Axis::Tp] = n;
    } else if (m[1] == "u") {
      l.deg[Axis::Ulysses] = n;
    } else {
      l.deg[Axis::Ring] = n;
    }
    any = true;
    rest = m.suffix().str();
  }
  DIT_CHECK(any, "empty layout");
  return l;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty()) out.push_back(x);
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace dit::bench
