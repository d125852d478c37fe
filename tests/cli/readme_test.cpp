// The manual's samples are the program's output: every code block whose lines start with "$ " is run, in
// order (README.md first, then every docs/**/*.md in sorted path order, so a page may use a run an earlier
// page made), in one scratch directory (configs/ and tests/ linked from the source tree, `tensorctl` on the
// PATH and as build/tensorctl), and each line shown under a command must be a line it prints (stdout and
// stderr together, in any order, as a pipe may reorder them; a sample may leave lines out). Numbers are
// compared by their form, not their value (timings and last digits vary by machine): each number reads as
// 9, so "0.090 ms" is "9.9 ms" and "1,234" is "9"; NaN and infinity read alike; a signed percentage reads as
// "±9.9%" (a measured difference such as the profiler's overhead falls either side of zero); a step's time
// reads the same in any unit ("254us/step" and "1ms/step" are alike: train picks the unit by the time).
// Table columns that are deterministic (Param #, MFLOP, Output Shape) compare exactly. HTML comments just
// above a block steer it:
//   <!-- test: skip WHY -->     the block is not run (hardware-specific output, mpirun, a Ctrl-C)
//   <!-- test: run COMMAND -->  a shell command run first, its output ignored (a run the sample needs)
//   <!-- test: vary TEXT -->    lines holding TEXT are not compared (a race's outcome differs run to run)
// The same pages' relative links must name files that exist (and headings that exist, for an anchor into
// a Markdown file), and every page of docs/ must be reachable from the README through them.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

struct Sample {
  std::string command;
  std::vector<std::string> expected;
};

struct Block {
  std::string page;  // relative to the source tree: README.md, docs/...
  int line = 0;      // of the opening fence, 1-based
  std::string skip;
  std::vector<std::string> setup;
  std::vector<std::string> vary;
  std::vector<Sample> samples;
};

// README.md, then every Markdown file under docs/ in sorted path order: the order the samples run in.
std::vector<std::string> manual_pages() {
  std::vector<fs::path> docs;
  const fs::path root = source_path("docs");
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file() && entry.path().extension() == ".md")
      docs.push_back("docs" / entry.path().lexically_relative(root));
  std::sort(docs.begin(), docs.end());
  std::vector<std::string> pages{"README.md"};
  for (const auto& d : docs) pages.push_back(d.generic_string());
  return pages;
}

std::vector<Block> blocks_of(const std::string& page) {
  const auto lines = split_lines(read_text(source_path(page)));
  std::vector<Block> blocks;
  std::vector<std::string> comments;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.starts_with("<!-- test: ")) {
      comments.push_back(l);
      continue;
    }
    if (!l.starts_with("```")) {
      if (!l.empty()) comments.clear();
      continue;
    }
    Block b;
    b.page = page;
    b.line = static_cast<int>(i + 1);
    for (const auto& c : comments) {
      const std::string body = c.substr(11, c.size() - 11 - 4);
      if (body.starts_with("skip ")) b.skip = body.substr(5);
      if (body.starts_with("run ")) b.setup.push_back(body.substr(4));
      if (body.starts_with("vary ")) b.vary.push_back(body.substr(5));
    }
    comments.clear();
    for (++i; i < lines.size() && !lines[i].starts_with("```"); ++i) {
      if (lines[i].starts_with("$ ")) {
        b.samples.push_back({lines[i].substr(2), {}});
      } else if (!b.samples.empty()) {
        b.samples.back().expected.push_back(lines[i]);
      }
    }
    if (!b.samples.empty()) blocks.push_back(std::move(b));
  }
  return blocks;
}

// The cells of a table row, split on the box-drawing column separators.
std::vector<std::string> cells_of(const std::string& line, const std::string& separator) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t at = line.find(separator); at != std::string::npos; at = line.find(separator, start)) {
    out.push_back(line.substr(start, at - start));
    start = at + separator.size();
  }
  out.push_back(line.substr(start));
  return out;
}

std::string collapse(const std::string& s) {
  // Thousands separators go with the digits, so 999 and 30,289 have one form.
  static const std::regex digits("[0-9][0-9,]*[0-9]|[0-9]"), spaces("[ \t]+"), rules("(─|━)+");
  // Which a diverging run meets first, an infinity or a NaN, depends on the processor's summation order.
  static const std::regex non_finite("\\b(NaN|nan|infinity|inf)\\b");
  // A difference measured as a percentage may come out either side of zero from one run to the next.
  static const std::regex signed_percent("[+-]([0-9][0-9.,]*%)");
  // Keras' progress line scales a step's time to its unit, so a loaded machine turns "254us/step" into
  // "1ms/step".
  static const std::regex step_time("\\b9(us|ms|s)/step");
  std::string out = std::regex_replace(s, non_finite, "<non-finite>");
  out = std::regex_replace(out, signed_percent, "±$1");
  out = std::regex_replace(out, digits, "9");
  out = std::regex_replace(out, step_time, "9<time>/step");
  out = std::regex_replace(out, rules, "-");
  out = std::regex_replace(out, spaces, " ");
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// A line in the form compared: numbers by shape, but for the exact columns of the table it belongs to.
class Normalizer {
 public:
  std::string operator()(const std::string& line) {
    static const std::regex spaces("[ \t]+");
    if (line.find("┃") != std::string::npos) {
      exact_.clear();
      for (const auto& h : cells_of(line, "┃"))
        exact_.push_back(h.find("Param #") != std::string::npos || h.find("Output Shape") != std::string::npos ||
                         (h.find("FLOP") != std::string::npos && h.find("/s") == std::string::npos));
    }
    if (line.find("│") == std::string::npos || exact_.empty()) return collapse(line);
    const auto cells = cells_of(line, "│");
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const bool exact = c < exact_.size() && exact_[c];
      std::string cell = exact ? std::regex_replace(cells[c], spaces, " ") : collapse(cells[c]);
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      while (!cell.empty() && cell.front() == ' ') cell.erase(0, 1);
      out += (c ? "|" : "") + cell;
    }
    return out;
  }

 private:
  std::vector<bool> exact_;
};

CommandResult shell(const fs::path& dir, const fs::path& bin, const std::string& command) {
  return run_shell_command("PATH=" + quoted(bin) + ":\"$PATH\" COLUMNS=200 sh -c " + quoted(fs::path(command)), dir);
}

// Runs one sample and checks that each line it shows is a line printed; not their order, which a pipe may
// change between stdout and stderr.
void check_sample(const TempDir& d, const fs::path& bin, const Block& b, const Sample& sample) {
  // `cat FILE` shows a file the next commands use: the sample's lines are its content.
  if (sample.command.starts_with("cat ") && !fs::exists(d / sample.command.substr(4))) {
    std::string text;
    for (const auto& l : sample.expected) text += l + "\n";
    d.write(sample.command.substr(4), text);
  }
  const CommandResult s = shell(d.path(), bin, sample.command);
  INFO("$ " << sample.command << "\n" << s.out);
  Normalizer expected_form, actual_form;
  std::multiset<std::string> actual;
  for (const auto& l : split_lines(s.out)) actual.insert(actual_form(l));
  for (const auto& e : sample.expected) {
    if (e == "..." || e.empty() ||
        std::any_of(b.vary.begin(), b.vary.end(), [&](const std::string& v) { return e.find(v) != std::string::npos; }))
      continue;
    const std::string want = expected_form(e);
    auto it = actual.find(want);
    CHECK_MESSAGE(it != actual.end(), "not printed: " << e << "\n  (compared as: " << want << ")");
    if (it != actual.end()) actual.erase(it);
  }
}

// GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, each space a '-'.
std::string anchor_of(const std::string& heading) {
  std::string out;
  for (const unsigned char c : heading) {
    if (c == ' ') out += '-';
    if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80) out += static_cast<char>(std::tolower(c));
  }
  return out;
}

struct Link {
  int line = 0;
  std::string target;
};

// What a Markdown file offers and points to, outside code blocks and code spans: the anchors of its headings
// (a repeated heading's with -1, -2, ... as GitHub numbers them) and its relative links.
struct PageLinks {
  std::set<std::string> anchors;
  std::vector<Link> links;
};

PageLinks links_of(const std::string& page) {
  static const std::regex link(R"(\]\(([^()\s]+)\))"), code_span("`[^`]*`");
  PageLinks out;
  std::map<std::string, int> seen;
  bool in_code = false;
  const auto lines = split_lines(read_text(source_path(page)));
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.starts_with("```")) in_code = !in_code;
    if (in_code || l.starts_with("```")) continue;
    const std::size_t text = l.find_first_not_of('#');
    if (text > 0 && text != std::string::npos && l[text] == ' ') {
      const std::string a = anchor_of(l.substr(text + 1));
      const int repeat = seen[a]++;
      out.anchors.insert(repeat ? a + "-" + std::to_string(repeat) : a);
    }
    const std::string prose = std::regex_replace(l, code_span, "");
    for (std::sregex_iterator m(prose.begin(), prose.end(), link), end; m != end; ++m) {
      const std::string target = (*m)[1];
      if (target.find("://") == std::string::npos && !target.starts_with("mailto:"))
        out.links.push_back({static_cast<int>(i + 1), target});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a step's time compares in any unit, other times and numbers by their form") {
  CHECK(collapse("41/41 - 0s - 254us/step - loss: 1.4887") == collapse("41/41 - 1s - 1ms/step - loss: 0.5"));
  CHECK(collapse("2/2 - 3s - 2s/step") == collapse("2/2 - 0s - 812us/step"));
  CHECK(collapse("forward 0.090 ms") != collapse("forward 0.090 us"));
  CHECK(collapse("254us/step") != collapse("254us/epoch"));
  CHECK(collapse("accuracy 0.9276") != collapse("accuracy 9276"));
}

TEST_CASE("every sample in the README and docs/ is what the program prints") {
  TempDir d;
  const fs::path bin = d / ".bin";
  fs::create_directories(bin);
  fs::create_symlink(TENSORCTL_BINARY, bin / "tensorctl");
  fs::create_directories(d / "build");
  fs::create_symlink(TENSORCTL_BINARY, d / "build/tensorctl");
  fs::create_directories(d / "docs");
  for (const char* linked : {"configs", "tests"}) fs::create_directory_symlink(source_path(linked), d / linked);
  int run = 0, skipped = 0;
  const auto pages = manual_pages();
  for (const auto& page : pages) {
    for (const Block& b : blocks_of(page)) {
      INFO(b.page << " line " << b.line);
      if (!b.skip.empty()) {
        ++skipped;
        continue;
      }
      for (const auto& command : b.setup) {
        const CommandResult s = shell(d.path(), bin, command);
        INFO("setup: " << command << "\n" << s.out);
        REQUIRE(s.status == 0);
      }
      for (const Sample& sample : b.samples) {
        ++run;
        check_sample(d, bin, b, sample);
      }
    }
  }
  MESSAGE(run << " commands run from " << pages.size() << " pages, " << skipped << " blocks skipped as marked");
  CHECK(run >= 30);
}

TEST_CASE("every relative link in the README and docs/ names a file and a heading that exist") {
  const auto pages = manual_pages();
  std::map<std::string, std::set<std::string>> pages_linked;  // page -> the Markdown files it links to
  int checked = 0;
  for (const auto& page : pages) {
    for (const Link& l : links_of(page).links) {
      INFO(page << " line " << l.line << ": " << l.target);
      ++checked;
      const std::size_t hash = l.target.find('#');
      const std::string file = l.target.substr(0, hash),
                        anchor = hash == std::string::npos ? "" : l.target.substr(hash + 1);
      const std::string target =
          file.empty() ? page : (fs::path(page).parent_path() / file).lexically_normal().generic_string();
      if (!fs::exists(source_path(target))) {
        FAIL_CHECK("no such file: " << target);
        continue;
      }
      if (!target.ends_with(".md")) continue;
      pages_linked[page].insert(target);
      if (!anchor.empty())
        CHECK_MESSAGE(links_of(target).anchors.count(anchor), "no heading #" << anchor << " in " << target);
    }
  }
  std::set<std::string> reached{"README.md"};
  for (std::vector<std::string> todo{"README.md"}; !todo.empty();) {
    const std::string page = todo.back();
    todo.pop_back();
    for (const auto& next : pages_linked[page])
      if (reached.insert(next).second) todo.push_back(next);
  }
  for (const auto& page : pages) CHECK_MESSAGE(reached.count(page), page << ": no link leads to it from README.md");
  MESSAGE(checked << " relative links checked in " << pages.size() << " pages");
  CHECK(checked >= 20);
}

}  // namespace tctl::cli_test
