// What a run's summary.json commits, read as JSON the way the Python reader reads it
// (`layout.check_committed`: `json.loads` of the UTF-8 text, the top-level "run_id" a string and
// "ok" true): any whitespace, key order or escaping `json.dumps` writes (indent or none, other
// separators, sort_keys, ensure_ascii) reads the same, and of duplicate keys the last wins, as in
// a Python dict. Scanning for one exact indentation refused a summary re-serialized compactly.
#ifndef TFX_DYNAMIC_INPUTS_NATIVE_SUMMARY_JSON_H_
#define TFX_DYNAMIC_INPUTS_NATIVE_SUMMARY_JSON_H_

#include <cstdint>
#include <fstream>
#include <string>

namespace tfx_dynamic_inputs {
namespace summary_json {

// Larger summaries are refused (a run's is a few kilobytes).
constexpr std::streamsize kMaxSummaryBytes = 64 << 20;
// Deeper nesting is refused; Python's parser stops near 1000 (its recursion limit), a summary
// nests 3 deep.
constexpr int kMaxDepth = 512;

struct Commit {
  std::string problem;  // non-empty: why the file is no summary ("is missing", ...)
  bool has_run_id = false;  // a top-level "run_id" that is a string
  std::string run_id;       // its UTF-8 bytes
  bool ok = false;          // a top-level "ok" that is true
};

// Whether `text` is well-formed UTF-8 as Python's strict decoder takes it: no overlong forms,
// no encoded surrogates, nothing past U+10FFFF.
inline bool IsUtf8(const std::string& text) {
  size_t at = 0;
  const size_t n = text.size();
  while (at < n) {
    const unsigned char c = text[at];
    int more;
    uint32_t low;  // the least code point of this length (refuses overlong forms)
    uint32_t cp;
    if (c < 0x80) {
      ++at;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      more = 1, low = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      more = 2, low = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      more = 3, low = 0x10000, cp = c & 0x07;
    } else {
      return false;
    }
    if (n - at <= static_cast<size_t>(more)) return false;
    for (int k = 1; k <= more; ++k) {
      const unsigned char next = text[at + k];
      if ((next & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (next & 0x3f);
    }
    if (cp < low || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    at += more + 1;
  }
  return true;
}

// A recursive-descent reader of one JSON document (RFC 8259, plus the NaN, Infinity and
// -Infinity that Python's `json` reads and writes) that keeps only the top-level "run_id" and
// "ok" of an object.
class Reader {
 public:
  explicit Reader(const std::string& text) : text_(text) {}

  // Reads the whole text as one JSON object into `commit`; false when it is not one.
  bool ReadObject(Commit* commit) {
    SkipSpace();
    if (!Object(0, commit)) return false;
    SkipSpace();
    return at_ == text_.size();
  }

 private:
  bool At(char c) const { return at_ < text_.size() && text_[at_] == c; }

  void SkipSpace() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' ||
                                  text_[at_] == '\n' || text_[at_] == '\r')) {
      ++at_;
    }
  }

  bool Word(const char* word) {
    const std::string expected(word);
    if (text_.compare(at_, expected.size(), expected) != 0) return false;
    at_ += expected.size();
    return true;
  }

  bool Digits() {
    const size_t start = at_;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
    return at_ > start;
  }

  bool Number() {
    if (At('-')) {
      ++at_;
      if (Word("Infinity")) return true;
    }
    if (At('0')) {
      ++at_;
    } else if (!Digits()) {
      return false;
    }
    if (At('.')) {
      ++at_;
      if (!Digits()) return false;
    }
    if (At('e') || At('E')) {
      ++at_;
      if (At('+') || At('-')) ++at_;
      if (!Digits()) return false;
    }
    return true;
  }

  bool Hex4(uint32_t* value) {
    if (text_.size() - at_ < 4) return false;
    *value = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text_[at_++];
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return false;
      }
      *value = (*value << 4) | digit;
    }
    return true;
  }

  // A code point as UTF-8 (a lone surrogate as its 3 bytes, as Python's "surrogatepass").
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  // A string, its escapes decoded into `out` (nullptr: skipped).
  bool String(std::string* out) {
    if (!At('"')) return false;
    ++at_;
    while (at_ < text_.size()) {
      const unsigned char c = text_[at_++];
      if (c == '"') return true;
      if (c < 0x20) return false;  // control characters are escaped in JSON
      if (c != '\\') {
        if (out != nullptr) out->push_back(static_cast<char>(c));
        continue;
      }
      if (at_ >= text_.size()) return false;
      const char escape = text_[at_++];
      char plain;
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          plain = escape;
          break;
        case 'b':
          plain = '\b';
          break;
        case 'f':
          plain = '\f';
          break;
        case 'n':
          plain = '\n';
          break;
        case 'r':
          plain = '\r';
          break;
        case 't':
          plain = '\t';
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          // A high surrogate followed by an escaped low one is one code point past U+FFFF.
          if (cp >= 0xd800 && cp <= 0xdbff && text_.compare(at_, 2, "\\u") == 0) {
            const size_t before = at_;
            at_ += 2;
            uint32_t low;
            if (Hex4(&low) && low >= 0xdc00 && low <= 0xdfff) {
              cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            } else {
              at_ = before;
            }
          }
          if (out != nullptr) AppendUtf8(cp, out);
          continue;
        }
        default:
          return false;
      }
      if (out != nullptr) out->push_back(plain);
    }
    return false;
  }

  bool Value(int depth) {
    if (depth > kMaxDepth || at_ >= text_.size()) return false;
    switch (text_[at_]) {
      case '{':
        return Object(depth, nullptr);
      case '[':
        return Array(depth);
      case '"':
        return String(nullptr);
      case 't':
        return Word("true");
      case 'f':
        return Word("false");
      case 'n':
        return Word("null");
      case 'N':
        return Word("NaN");
      case 'I':
        return Word("Infinity");
      default:
        return Number();
    }
  }

  bool Array(int depth) {
    ++at_;  // '['
    SkipSpace();
    if (At(']')) {
      ++at_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (!Value(depth + 1)) return false;
      SkipSpace();
      if (At(']')) {
        ++at_;
        return true;
      }
      if (!At(',')) return false;
      ++at_;
    }
  }

  // An object; at the top (`commit` set) its "run_id" and "ok" go into `commit`.
  bool Object(int depth, Commit* commit) {
    if (!At('{')) return false;
    ++at_;
    SkipSpace();
    if (At('}')) {
      ++at_;
      return true;
    }
    while (true) {
      SkipSpace();
      std::string key;
      if (!String(&key)) return false;
      SkipSpace();
      if (!At(':')) return false;
      ++at_;
      SkipSpace();
      if (commit != nullptr && key == "run_id") {
        commit->run_id.clear();
        commit->has_run_id = At('"');
        if (!(commit->has_run_id ? String(&commit->run_id) : Value(depth + 1))) return false;
      } else if (commit != nullptr && key == "ok") {
        commit->ok = Word("true");
        if (!commit->ok && !Value(depth + 1)) return false;
      } else if (!Value(depth + 1)) {
        return false;
      }
      SkipSpace();
      if (At('}')) {
        ++at_;
        return true;
      }
      if (!At(',')) return false;
      ++at_;
    }
  }

  const std::string& text_;
  size_t at_ = 0;
};

// What the summary.json at `path` commits; `problem` says why it commits nothing readable.
inline Commit ReadCommit(const std::string& path) {
  Commit commit;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    commit.problem = "is missing or cannot be read";
    return commit;
  }
  std::string text(kMaxSummaryBytes + 1, '\0');
  file.read(&text[0], kMaxSummaryBytes + 1);
  text.resize(file.gcount());
  if (static_cast<std::streamsize>(text.size()) > kMaxSummaryBytes) {
    commit.problem = "is larger than 64 MiB";
  } else if (!IsUtf8(text) || !Reader(text).ReadObject(&commit)) {
    commit = Commit();
    commit.problem = "is not a UTF-8 JSON object";
  }
  return commit;
}

}  // namespace summary_json
}  // namespace tfx_dynamic_inputs

#endif  // TFX_DYNAMIC_INPUTS_NATIVE_SUMMARY_JSON_H_
