// Tokenizers (include/hpctrain/data/tokenizer.hpp) on small hand-made vocabularies: the byte
// vocabulary, spec resolution and the errors for missing, FIFO and malformed files. Agreement
// with the reference libraries on real vocabularies is tests/e2e/data/tokenizer_reference_test.sh.

#include <sys/stat.h>

#include <fstream>
#include <thread>
#include <vector>

#include "hpctrain/data/tokenizer.hpp"
#include "test_util.hpp"

namespace hpctrain::data {
namespace {

using testing::error_of;
using testing::make_temp_dir;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(ByteTokenizer, EncodesBytesAndDecodesThemBack) {
  const auto tok = load_tokenizer("bytes");
  const std::string text = "h\xc3\xa9llo\n\t \xf0\x9f\x98\x80";
  const auto ids = tok->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'h');
  EXPECT_EQ(ids[1], 0xc3);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_FALSE(tok->eot_id().has_value());
  EXPECT_FALSE(tok->token_id("<|endoftext|>").has_value());
  EXPECT_EQ(tok->identity(), "bytes");
  EXPECT_HAS(error_of([&] { tok->decode({1, 256}); }), "token id 256 at position 1");
}

TEST(LoadTokenizer, RefusesMissingFifoAndUnknownPaths) {
  const std::string dir = make_temp_dir();
  EXPECT_HAS(error_of([&] { load_tokenizer(dir + "/nothing.json"); }), "does not exist");
  EXPECT_HAS(error_of([&] { load_tokenizer(""); }), "tokenizer is empty");
  EXPECT_HAS(error_of([&] { load_tokenizer(dir); }), "holds neither tokenizer.json");
  ASSERT_EQ(::mkfifo((dir + "/tokenizer.json").c_str(), 0600), 0);
  // Must not block on the FIFO: refused from stat alone.
  EXPECT_HAS(error_of([&] { load_tokenizer(dir); }), "(a FIFO)");
  EXPECT_HAS(error_of([&] { load_tokenizer(dir + "/tokenizer.json"); }), "(a FIFO)");
  const std::string other = make_temp_dir();
  write(other + "/encoder.json", "{}");
  EXPECT_HAS(error_of([&] { load_tokenizer(other); }), "vocab.bpe' does not exist");
  write(other + "/vocab.txt", "a 1\n");
  EXPECT_HAS(error_of([&] { load_tokenizer(other + "/vocab.txt"); }), "of no known kind");
}

// A tiktoken file of the 256 bytes (ranks 0..255, in byte order) and `extra` tokens after them.
std::string tiktoken_file(const std::string& dir, const std::string& name,
                          const std::vector<std::string>& extra) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto base64 = [](const std::string& bytes) {
    std::string out;
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
      std::uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
      if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
      if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
      out += kAlphabet[(v >> 18) & 63];
      out += kAlphabet[(v >> 12) & 63];
      out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
      out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
    }
    return out;
  };
  std::string text;
  for (int b = 0; b < 256; ++b)
    text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (std::size_t i = 0; i < extra.size(); ++i)
    text += base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  const std::string path = dir + "/" + name;
  write(path, text);
  return path;
}

TEST(TiktokenFile, MergesLowestRankFirstAndFindsSpecialTokens) {
  const std::string dir = make_temp_dir();
  // 256 "he", 257 "ll", 258 "hell", 259 "hello", 260 " wor"
  const auto tok =
      load_tokenizer(tiktoken_file(dir, "gpt2.tiktoken", {"he", "ll", "hell", "hello"}));
  EXPECT_EQ(tok->encode("hello"), (std::vector<std::int64_t>{259}));  // whole piece is a token
  // h e l l x: he (256) first, then ll (257), then he+ll = hell (258).
  EXPECT_EQ(tok->encode("hellx"), (std::vector<std::int64_t>{258, 'x'}));
  // GPT-2's pattern splits " hello" and "!!"; the special token is found whole.
  EXPECT_EQ(tok->encode("hello<|endoftext|>!!"), (std::vector<std::int64_t>{259, 50256, '!', '!'}));
  EXPECT_EQ(tok->eot_id(), 50256);
  EXPECT_EQ(tok->token_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok->token_id("hell"), 258);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_HAS(tok->identity(), "tiktoken:gpt2.tiktoken:xxh64=");
  const std::string text = "hello hellx\n\n  \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 123<|endoftext|>";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_HAS(error_of([&] { tok->decode({300}); }),
             "token id 300 at position 0 is not in the vocabulary");
  EXPECT_HAS(error_of([&] { tok->encode("ab\xff"); }), "invalid byte 0xff at offset 2");
}

TEST(TiktokenFile, LongPiecesMergeLikeShortOnes) {
  const std::string dir = make_temp_dir();
  const auto tok = load_tokenizer(tiktoken_file(dir, "r50k_base.tiktoken", {"ll", "llll"}));
  for (const std::size_t n : {7, 63, 64, 65, 301}) {
    // Leftmost pairs merge first: l l l l l l l -> ll ll ll l -> llll ll l
    std::vector<std::int64_t> expected(n / 4, 257);
    if (n % 4 >= 2) expected.push_back(256);
    if (n % 2 == 1) expected.push_back('l');
    EXPECT_EQ(tok->encode(std::string(n, 'l')), expected) << n << " bytes";
  }
}

TEST(TiktokenFile, EncodesFromSeveralThreadsAtOnce) {
  const std::string dir = make_temp_dir();
  const auto tok = load_tokenizer(tiktoken_file(dir, "gpt2.tiktoken", {"he", "ll", "hell", "lo"}));
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "hello hellx yellow " + std::to_string(i) + "\n";
  const auto expected = tok->encode(text);
  std::vector<std::vector<std::int64_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&tok, &text, &g] { g = tok->encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
  EXPECT_EQ(tok->decode(expected), text);
}

TEST(TiktokenFile, RefusesMalformedFilesNamingTheLine) {
  const std::string dir = make_temp_dir();
  const std::string path = tiktoken_file(dir, "cl100k_base.tiktoken", {"ab"});
  std::ofstream(path, std::ios::app) << "YWJj\n";
  EXPECT_HAS(error_of([&] { load_tokenizer(path); }), "cl100k_base.tiktoken', line 258: expected");
  const std::string twice = tiktoken_file(dir, "o200k_base.tiktoken", {});
  std::ofstream(twice, std::ios::app) << "YWJj 5\n";
  EXPECT_HAS(error_of([&] { load_tokenizer(twice); }), "line 257: rank 5 is given twice");
  const std::string unknown = tiktoken_file(dir, "mine.tiktoken", {});
  EXPECT_HAS(error_of([&] { load_tokenizer(unknown); }), "its name does not say which encoding");
  const std::string holes = dir + "/gpt2.tiktoken";
  write(holes, "YQ== 0\n");
  EXPECT_HAS(error_of([&] { load_tokenizer(holes); }), "has no token for the byte 0x0");
}

// A tokenizer.json over the byte-level alphabet with `merges` and `extra` JSON members.
std::string hf_file(const std::string& dir, const std::string& merges, const std::string& extra) {
  std::string vocab;
  int next = 256;  // GPT-2's byte-to-unicode mapping, written out; byte b gets id b
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 = std::string(1, static_cast<char>(cp));
      if (cp == '"' || cp == '\\') utf8 = "\\" + utf8;
    } else {
      utf8 += static_cast<char>(0xC0 | (cp >> 6));
      utf8 += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab += (b ? ", \"" : "\"") + utf8 + "\": " + std::to_string(b);
  }
  vocab += ", \"he\": 256, \"ll\": 257, \"hell\": 258, \"\xc4\xa0h\": 259";
  const std::string path = dir + "/tokenizer.json";
  write(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {" + vocab + "}, \"merges\": " + merges +
                  "}" + extra + "}");
  return path;
}

const char* kHfParts =
    R"(, "added_tokens": [{"id": 300, "content": "<|endoftext|>", "special": true,
        "normalized": false}],
       "normalizer": {"type": "NFC"},
       "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
         {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+|[^\\s\\p{L}]+"},
          "behavior": "Isolated", "invert": false},
         {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";

TEST(HuggingFaceFile, NormalizesSplitsAndMergesByRank) {
  const std::string dir = make_temp_dir();
  // Merges as "a b" strings and as pairs, both forms Hugging Face writes.
  const auto tok =
      load_tokenizer(hf_file(dir, R"(["h e", ["l", "l"], "he ll", "\u0120 h"])", kHfParts));
  EXPECT_EQ(tok->encode("hell"), (std::vector<std::int64_t>{258}));
  EXPECT_EQ(tok->encode(" hell"), (std::vector<std::int64_t>{' ', 258}));
  // With "\u0120 h" (space + h) ranked first, it merges before "h e" can.
  const auto first = load_tokenizer(
      hf_file(make_temp_dir(), R"(["\u0120 h", "h e", ["l", "l"], "he ll"])", kHfParts));
  EXPECT_EQ(first->encode(" hell"), (std::vector<std::int64_t>{259, 'e', 257}));
  EXPECT_EQ(tok->encode("hell<|endoftext|>"), (std::vector<std::int64_t>{258, 300}));
  // NFC: e + combining acute becomes U+00E9 before splitting; its bytes C3 A9 are ids 0xC3, 0xA9.
  EXPECT_EQ(tok->encode("e\xcc\x81"), (std::vector<std::int64_t>{0xC3, 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("e\xcc\x81")), "\xc3\xa9");
  EXPECT_EQ(tok->vocab_size(), 301);
  EXPECT_EQ(tok->eot_id(), 300);
  EXPECT_EQ(tok->decode({258, 300}), "hell<|endoftext|>");
  EXPECT_HAS(tok->identity(), "hf-bpe:tokenizer.json:xxh64=");
  // The folder form finds the same file.
  EXPECT_EQ(load_tokenizer(dir)->identity(), tok->identity());
}

TEST(HuggingFaceFile, RefusesMalformedFieldsNamingThem) {
  auto error_for = [](const std::string& merges, const std::string& extra) {
    const std::string dir = make_temp_dir();
    return error_of([&] { load_tokenizer(hf_file(dir, merges, extra)); });
  };
  EXPECT_HAS(error_for(R"(["h x"])", kHfParts), "merge 0 ('h' + 'x') uses the token 'hx'");
  EXPECT_HAS(error_for(R"(["h"])", kHfParts), "field model.merges[0] is 'h': expected two tokens");
  EXPECT_HAS(error_for(R"(["h e"])", ""), "field pre_tokenizer has no ByteLevel step");
  EXPECT_HAS(error_for("{}", kHfParts), "field model.merges should be a list");
  EXPECT_HAS(error_for(R"([])", R"(, "pre_tokenizer": {"type": "Whitespace"})"),
             "field pre_tokenizer.type is 'Whitespace'");
  EXPECT_HAS(
      error_for(R"([])",
                R"(, "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "ByteLevel"})"),
      "field normalizer.type is 'Lowercase'");
  EXPECT_HAS(
      error_for(
          R"([])",
          R"(, "added_tokens": [{"id": 1, "content": "x", "lstrip": true}], "pre_tokenizer": {"type": "ByteLevel"})"),
      "field added_tokens[0].lstrip is true");
  EXPECT_HAS(
      error_for(R"([])", R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}})"),
      "split pattern cannot be compiled");
  const std::string dir = make_temp_dir();
  write(dir + "/tokenizer.json", "{\"model\": ");
  EXPECT_HAS(error_of([&] { load_tokenizer(dir); }), "is not valid JSON");
  write(dir + "/tokenizer.json", "{\"model\": {\"type\": \"Unigram\"}}");
  EXPECT_HAS(error_of([&] { load_tokenizer(dir); }), "field model.type is \"Unigram\"");
  write(dir + "/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}");
  EXPECT_HAS(error_of([&] { load_tokenizer(dir); }), "field model.vocab is missing");
}

TEST(Gpt2Files, ReadsEncoderAndMerges) {
  const std::string hf = hf_file(make_temp_dir(), "[]", "");
  const std::string dir = make_temp_dir();
  // encoder.json = the vocabulary above plus <|endoftext|>; vocab.bpe = its merges.
  std::ifstream in(hf);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t begin = json.find("\"vocab\": ") + 9, end = json.find("}, \"merges\"");
  write(dir + "/encoder.json", json.substr(begin, end - begin) + ", \"<|endoftext|>\": 260}");
  write(dir + "/vocab.bpe", "#version: 0.2\nh e\nl l\nhe ll\n");
  const auto tok = load_tokenizer(dir + "/encoder.json");
  EXPECT_EQ(tok->encode("hell hell<|endoftext|>"),
            (std::vector<std::int64_t>{258, ' ', 258, 260}));  // byte b has id b here
  EXPECT_EQ(tok->eot_id(), 260);
  EXPECT_EQ(tok->vocab_size(), 261);
  EXPECT_HAS(tok->identity(), "gpt2-bpe:encoder.json+vocab.bpe:xxh64=");
  write(dir + "/vocab.bpe", "#version: 0.2\nh e\nl\n");
  EXPECT_HAS(error_of([&] { load_tokenizer(dir); }), "vocab.bpe', line 3");
}

}  // namespace
}  // namespace hpctrain::data
