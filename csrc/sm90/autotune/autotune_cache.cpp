#include "sm90/autotune/autotune_cache.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fp8ext::sm90 {
namespace {

constexpr const char* kFormat = "fp8ext-autotune-1";
constexpr int kMaxDepth = 64;  // nesting a reader follows before it calls a file malformed (no stack overflow)

std::string errno_text(int err) { return std::strerror(err); }

// Closes a POSIX descriptor with its scope (closing also releases a flock held through it).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// The byte offset of the first invalid UTF-8 sequence, or npos. JSON text is UTF-8; the bucket and kernel
// names become Python strings, which must decode.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80 ? 0 : (c >= 0xc2 && c < 0xe0) ? 1 : (c >> 4) == 0xe ? 2 : (c >= 0xf0 && c < 0xf5) ? 3
                                                                                                              : -1;
    if (extra < 0 || i + extra >= s.size()) return i;
    for (int k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return i;
    }
    // What Python's strict decoder also refuses: overlong forms, UTF-16 surrogates, code points past U+10FFFF.
    const auto next = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xe0 && next < 0xa0) || (c == 0xed && next >= 0xa0) || (c == 0xf0 && next < 0x90) ||
        (c == 0xf4 && next >= 0x90)) {
      return i;
    }
    i += 1 + extra;
  }
  return std::string_view::npos;
}

void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// A strict JSON reader of just what the cache needs: strings are decoded, every other value is checked and
// skipped. The first error (with its byte offset) is kept.
class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  const std::string& error() const { return error_; }
  bool at_end() {
    skip_ws();
    return i_ == s_.size();
  }
  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }

  bool fail(const std::string& what) {
    if (error_.empty()) {
      error_ = i_ >= s_.size() ? "it ends in the middle of the JSON document: truncated"
                               : what + " at byte " + std::to_string(i_);
    }
    return false;
  }

  bool expect(char c) {
    if (peek(c)) {
      ++i_;
      return true;
    }
    return fail(std::string("expected '") + c + "'");
  }

  // A JSON string into *out (nullptr: checked and dropped).
  bool string(std::string* out) {
    if (!expect('"')) return false;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return --i_, fail("a control character inside a string");
      if (c != '\\') {
        if (out != nullptr) *out += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
      if (const size_t k = kFrom.find(e); k != std::string_view::npos) {
        if (out != nullptr) *out += kTo[k];
      } else if (e == 'u') {
        uint32_t cp = 0;
        if (!hex4(&cp)) return false;
        if (cp >= 0xd800 && cp < 0xdc00) {  // a UTF-16 surrogate pair: the low half follows as \uXXXX
          uint32_t low = 0;
          if (!(i_ + 1 < s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u' && (i_ += 2, hex4(&low)) &&
                low >= 0xdc00 && low < 0xe000)) {
            return fail("an unpaired UTF-16 surrogate");
          }
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
          return fail("an unpaired UTF-16 surrogate");
        }
        if (out != nullptr) append_utf8(out, cp);
      } else {
        return --i_, fail("an invalid escape in a string");
      }
    }
    return fail("an unterminated string");
  }

  // Any JSON value, checked and dropped.
  bool skip_value(int depth = 0) {
    if (depth > kMaxDepth) return fail("nesting deeper than " + std::to_string(kMaxDepth));
    skip_ws();
    if (i_ >= s_.size()) return fail("");
    const char c = s_[i_];
    if (c == '"') return string(nullptr);
    if (c == '{') return object([&](const std::string&) { return skip_value(depth + 1); });
    if (c == '[') {
      ++i_;
      if (peek(']')) return ++i_, true;
      do {
        if (!skip_value(depth + 1)) return false;
      } while (peek(',') && ++i_);
      return expect(']');
    }
    for (const std::string_view word : {"true", "false", "null"}) {
      if (s_.substr(i_, word.size()) == word) return i_ += word.size(), true;
    }
    const size_t start = i_;
    while (i_ < s_.size() && std::strchr("+-.0123456789eE", s_[i_]) != nullptr && s_[i_] != '\0') ++i_;
    return i_ > start || fail("an unexpected character");
  }

  // An object; member(key) reads each value.
  template <class Member>
  bool object(Member&& member) {
    if (!expect('{')) return false;
    if (peek('}')) return ++i_, true;
    do {
      std::string key;
      if (!string(&key) || !expect(':') || !member(key)) return false;
    } while (peek(',') && ++i_);
    return expect('}');
  }

 private:
  void skip_ws() {
    while (i_ < s_.size() && std::strchr(" \t\r\n", s_[i_]) != nullptr && s_[i_] != '\0') ++i_;
  }

  bool hex4(uint32_t* cp) {
    if (i_ + 4 > s_.size()) return fail("a truncated \\u escape");
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_];
      const int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (v < 0) return fail("an invalid \\u escape");
      *cp = *cp * 16 + static_cast<uint32_t>(v);
      ++i_;
    }
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

// The reasons a file's text is not a cache; "" and *entries filled when it is one.
std::string parse_cache(std::string_view text, CacheEntries* entries) {
  if (text.empty()) return "it is empty";
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return "it holds NUL bytes (the first at byte " + std::to_string(nul) +
           "), as a write cut short by a crash or a full disk leaves";
  }
  if (const size_t bad = invalid_utf8_at(text); bad != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<unsigned char>(text[bad]));
    return std::string("it is not UTF-8 text (byte ") + byte + " at offset " + std::to_string(bad) + ")";
  }
  JsonReader json(text);
  bool shaped = json.peek('{');  // stays true while the document has the cache's shape
  bool has_format = false, has_entries = false;
  bool ok = false;
  if (shaped) {
    ok = json.object([&](const std::string& key) {
      if (key == "format" && json.peek('"')) {
        std::string format;
        if (!json.string(&format)) return false;
        has_format = format == kFormat;
        return true;
      }
      if (key == "entries" && json.peek('{')) {
        has_entries = true;
        return json.object([&](const std::string& bucket) {
          if (!json.peek('"')) return shaped = false, json.skip_value();
          std::string kernel;
          if (!json.string(&kernel)) return false;
          (*entries)[bucket] = std::move(kernel);
          return true;
        });
      }
      if (key == "format" || key == "entries") shaped = false;
      return json.skip_value();
    });
  } else {
    ok = json.skip_value();
  }
  if (ok && !json.at_end()) ok = json.fail("more text after the JSON document");
  if (!ok) return "it is not valid JSON (" + json.error() + ")";
  if (!(shaped && has_format && has_entries)) {
    entries->clear();
    return std::string("it is not an fp8ext autotune cache (expected a JSON object with \"format\": \"") + kFormat +
           "\" and \"entries\" mapping strings to kernel names)";
  }
  return "";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string serialise(const CacheEntries& entries) {
  std::string out = std::string("{\n  \"format\": \"") + kFormat + "\",\n  \"entries\": {";
  bool first = true;
  for (const auto& [bucket, kernel] : entries) {
    out += (first ? "\n    " : ",\n    ") + json_string(bucket) + ": " + json_string(kernel);
    first = false;
  }
  return out + (first ? "}\n}\n" : "\n  }\n}\n");
}

// A name no other writer uses at the same time: the pid alone is not enough (containers share pids, and
// threads of one process share one), so the thread, a per-process counter and a random number join it.
// O_EXCL in the caller turns a collision into a retry rather than two writers sharing one file.
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  char suffix[96];
  std::snprintf(suffix, sizeof(suffix), ".tmp.%ld.%zx.%llu.%llx", static_cast<long>(::getpid()),
                std::hash<std::thread::id>{}(std::this_thread::get_id()),
                static_cast<unsigned long long>(counter.fetch_add(1)), static_cast<unsigned long long>(salt));
  return path + suffix;
}

std::string write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_text(errno);
    done += static_cast<size_t>(n);
  }
  return "";
}

// Writes `data` to a fresh temporary file beside `path`, fsyncs it and renames it over `path`; then fsyncs the
// directory so that the rename itself survives a crash.
std::string replace_file(const std::string& path, const std::string& data) {
  std::string tmp;
  int raw = -1;
  for (int attempt = 0; attempt < 8 && raw < 0; ++attempt) {
    tmp = temporary_name(path);
    raw = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (raw < 0 && errno != EEXIST) break;
  }
  if (raw < 0) return "cannot create " + tmp + ": " + errno_text(errno);
  Fd fd(raw);
  std::string err = write_all(fd.get(), data);
  if (err.empty() && ::fsync(fd.get()) != 0) err = errno_text(errno);
  if (err.empty() && ::close(fd.release()) != 0) err = errno_text(errno);
  if (!err.empty()) {
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + ": " + err;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno_text(errno);
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp + " to " + path + ": " + err;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());  // best effort: some file systems refuse a directory fsync
  return "";
}

}  // namespace

CacheRead read_cache(const std::string& path) {
  CacheRead r;
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one forever (the file is checked to be a
  // regular one only once it is open); it changes nothing for a regular file's reads.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    r.exists = errno != ENOENT;
    if (r.exists) r.error = "it cannot be opened (" + errno_text(errno) + ")";
    return r;
  }
  r.exists = true;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return r.error = "it cannot be examined (" + errno_text(errno) + ")", r;
  if (S_ISDIR(st.st_mode)) return r.error = "it is a directory", r;
  if (!S_ISREG(st.st_mode)) return r.error = "it is not a regular file", r;
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return r.error = "it cannot be read (" + errno_text(errno) + ")", r;
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  r.error = parse_cache(text, &r.entries);
  return r;
}

std::string write_cache(const std::string& path, const CacheEntries& choices) {
  const std::string lock_path = path + ".lock";
  const Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
  if (lock.get() < 0) return "cannot open the lock file " + lock_path + ": " + errno_text(errno);
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return "cannot lock " + lock_path + ": " + errno_text(errno);
  }
  // Another writer may have added buckets since this process loaded the file: keep them.
  const CacheRead current = read_cache(path);
  CacheEntries merged = current.error.empty() ? current.entries : CacheEntries{};
  for (const auto& [bucket, kernel] : choices) merged[bucket] = kernel;
  return replace_file(path, serialise(merged));
}  // the lock is released when `lock` closes, after the rename

}  // namespace fp8ext::sm90
