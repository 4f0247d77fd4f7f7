#include "tools/common/command.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <memory>
#include <sstream>
#include <utility>

#include "ferry_config.h"

namespace ferry::tools {
namespace {

constexpr std::string_view kIndent = "    ";

std::string Indent(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty()) out.append(kIndent).append(line);
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// CLI11's formatter with man-page section headings. The option lines themselves stay CLI11's
// (aligned names, types, defaults), so every command lists its options the same way.
class ManFormatter : public CLI::Formatter {
 public:
  explicit ManFormatter(CommandDoc doc) : doc_(std::move(doc)) { column_width(34); }

  // CLI11 prints the description before the usage line; man pages put the SYNOPSIS first, so
  // the DESCRIPTION section is written by make_usage().
  std::string make_description(const CLI::App*) const override {
    return "NAME\n" + Indent(doc_.name + " - " + doc_.summary);
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = doc_.synopsis;
    if (usage.empty()) {
      // CLI11 writes "Usage: name [OPTIONS] positionals\n"; keep its synopsis, not its heading.
      usage = CLI::Formatter::make_usage(app, std::move(name));
      const size_t colon = usage.find(':');
      if (colon != std::string::npos) usage = usage.substr(colon + 1);
      while (!usage.empty() && usage.front() == ' ') usage.erase(0, 1);
      usage = usage.substr(0, usage.find_last_not_of('\n') + 1);
    }
    std::string out = "\nSYNOPSIS\n" + Indent(usage);
    if (!doc_.description.empty()) out += "\nDESCRIPTION\n" + Indent(doc_.description);
    return out;
  }

  std::string make_group(std::string group, bool is_positional,
                         std::vector<const CLI::Option*> opts) const override {
    std::ostringstream out;
    out << '\n' << Upper(group) << '\n';
    for (const CLI::Option* opt : opts) out << make_option(opt, is_positional);
    return out.str();
  }

  std::string make_footer(const CLI::App*) const override {
    std::string out;
    if (!doc_.examples.empty()) {
      std::string lines;
      for (const std::string& e : doc_.examples) lines += e + '\n';
      out += "\nEXAMPLES\n" + Indent(lines);
    }
    if (!doc_.exit_status.empty()) out += "\nEXIT STATUS\n" + Indent(doc_.exit_status);
    if (!doc_.see_also.empty()) {
      std::string list;
      for (const std::string& s : doc_.see_also) list += (list.empty() ? "" : ", ") + s;
      out += "\nSEE ALSO\n" + Indent(list);
    }
    out += "\nVERSION\n" + Indent(VersionLine(doc_.name));
    return out;
  }

 private:
  CommandDoc doc_;
};

}  // namespace

std::string VersionLine(std::string_view name) {
  return std::string(name) + " (Ferry) " + FERRY_VERSION;
}

void SetUpCommand(CLI::App& app, CommandDoc doc) {
  app.name(doc.name);
  app.description(doc.summary);
  app.footer("");
  app.set_help_flag("-h,--help", "print this help and exit");
  app.set_version_flag("--version", VersionLine(doc.name), "print the version and exit");
  app.formatter(std::make_shared<ManFormatter>(std::move(doc)));
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return std::nullopt;
}

int ReportError(std::string_view tool, const std::string& message, int code) {
  std::fprintf(stderr, "%.*s: error: %s\n", static_cast<int>(tool.size()), tool.data(),
               message.c_str());
  if (code == 2) std::fprintf(stderr, "Run with --help for usage.\n");
  return code;
}

Result<std::pair<std::string, std::string>> SplitKeyValue(std::string_view flag,
                                                          const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument(std::string(flag) + " '" + text + "' is not KEY=VALUE");
  }
  return std::pair(text.substr(0, eq), text.substr(eq + 1));
}

}  // namespace ferry::tools
