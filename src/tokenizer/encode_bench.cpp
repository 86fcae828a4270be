// encode_bench.cpp — activekv_tokenizer_bench: encode and decode throughput.
//
// Reads text files (concatenated, capped at --bytes), encodes the whole text
// --repeat times with one warm EncodeScratch, and prints the median tokens/s and
// MB/s of encoding, then of decoding the ids back (whole decode and streaming).
//
//   activekv_tokenizer_bench --model m.gguf --text a.txt b.py ... [--bytes 4000000] [--repeat 5]
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "gguf/gguf.hpp"
#include "tokenizer/stream_decoder.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

template <typename F>
double median_seconds(int repeat, F&& run) {
  std::vector<double> seconds;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace activekv;
  CLI::App app{"Tokenizer encode/decode throughput"};
  std::string model;
  std::vector<std::string> texts;
  std::size_t bytes_max = 4'000'000;
  int repeat = 5;
  app.add_option("--model", model, "GGUF model file")->required();
  app.add_option("--text", texts, "text files, concatenated")->required();
  app.add_option("--bytes", bytes_max, "cap on the text's bytes");
  app.add_option("--repeat", repeat, "runs; the median is reported")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::string text;
  for (const std::string& path : texts) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      fmt::print(stderr, "--text: cannot open {}\n", path);
      return 1;
    }
    std::ostringstream s;
    s << in.rdbuf();
    text += s.str();
    if (text.size() >= bytes_max) break;
  }
  text.resize(std::min(text.size(), bytes_max));

  auto file = gguf::File::open(model);
  if (!file) {
    fmt::print(stderr, "{}\n", file.error().describe());
    return 1;
  }
  const auto load_start = std::chrono::steady_clock::now();
  auto tok = tokenizer::Tokenizer::from_gguf(*file);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  if (!tok) {
    fmt::print(stderr, "{}\n", tok.error().describe());
    return 1;
  }

  tokenizer::EncodeScratch scratch;
  std::vector<tokenizer::TokenId> ids;
  const double encode_s = median_seconds(repeat, [&] {
    ids.clear();
    tok->encode(text, tokenizer::Special::plain, scratch, ids);
  });
  std::string decoded;
  const double decode_s = median_seconds(repeat, [&] { decoded = tok->decode(ids); });
  tokenizer::StreamDecoder stream(*tok, false);
  std::size_t streamed = 0;
  const double stream_s = median_seconds(repeat, [&] {
    streamed = 0;
    for (const tokenizer::TokenId id : ids) streamed += stream.push(id).size();
    streamed += stream.finish().size();
  });

  const double mb = static_cast<double>(text.size()) / 1e6;
  const double tokens = static_cast<double>(ids.size());
  fmt::print("text: {} bytes, {} tokens ({:.2f} bytes/token); tokenizer load {:.1f} ms\n", text.size(), ids.size(),
             static_cast<double>(text.size()) / tokens, load_s * 1e3);
  fmt::print("encode:        {:>10.0f} tokens/s  {:>7.2f} MB/s  (median of {})\n", tokens / encode_s, mb / encode_s,
             repeat);
  fmt::print("decode:        {:>10.0f} tokens/s  {:>7.2f} MB/s\n", tokens / decode_s, mb / decode_s);
  fmt::print("stream decode: {:>10.0f} tokens/s  {:>7.2f} MB/s\n", tokens / stream_s, mb / stream_s);
  fmt::print("round trip: {}\n", decoded == text ? "exact" : "differs (text holds bytes without tokens)");
  return decoded.size() == streamed ? 0 : 1;
}
