// Internal text helpers of the tokenizer: UTF-8 validation, the GPT-2 byte alphabet, and the
// piecewise NFC (checked against utf8proc's whole-text NFC).
#include "engine/tokenizer/text_util.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace scored {
namespace tokenizer_internal {
namespace {

std::string WholeTextNfc(const std::string& text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(n, 0);
  std::string result(reinterpret_cast<const char*>(out), n < 0 ? 0 : static_cast<size_t>(n));
  std::free(out);
  return result;
}

TEST(TextUtilTest, NfcKnownAnswers) {
  EXPECT_EQ(NormalizeNfc("cafe\xCC\x81").value(), "caf\xC3\xA9");          // e + U+0301 -> é
  EXPECT_EQ(NormalizeNfc("A\xCC\x8A!").value(), "\xC3\x85!");              // A + ring -> Å
  EXPECT_EQ(NormalizeNfc("\xE2\x84\xAA").value(), "K");                    // Kelvin sign -> K
  EXPECT_EQ(NormalizeNfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8").value(),  // Hangul L V T -> 각
            "\xEA\xB0\x81");
  // Combining marks out of canonical order are reordered (ogonek ccc 202 before acute ccc 230).
  EXPECT_EQ(NormalizeNfc("a\xCC\x81\xCC\xA8").value(), WholeTextNfc("a\xCC\x81\xCC\xA8"));
  EXPECT_EQ(NormalizeNfc("plain ascii").value(), "plain ascii");
  EXPECT_EQ(NormalizeNfc("").value(), "");
}

TEST(TextUtilTest, NfcPiecewiseEqualsWholeText) {
  std::ifstream in(std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw", std::ios::binary);
  const std::string wiki((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(wiki.size(), 1000000u);
  const std::string mixed = "x\xCC\x81y e\xCC\x81\xCC\x81 \xE2\x84\xAA\xCC\x81 o\xCC\x88\xCC\xA3!";
  for (const std::string& text : {wiki, mixed, mixed + wiki.substr(0, 5000) + mixed}) {
    const auto nfc = NormalizeNfc(text);
    ASSERT_TRUE(nfc.ok());
    EXPECT_TRUE(*nfc == WholeTextNfc(text));
  }
}

TEST(TextUtilTest, ValidateUtf8) {
  EXPECT_TRUE(ValidateUtf8("h\xC3\xA9llo \xF0\x9F\x99\x82").ok());
  EXPECT_FALSE(ValidateUtf8("\xC0\xAF").ok());          // overlong '/'
  EXPECT_FALSE(ValidateUtf8("\xED\xA0\x80").ok());      // surrogate U+D800
  EXPECT_FALSE(ValidateUtf8("\xF4\x90\x80\x80").ok());  // > U+10FFFF
  EXPECT_FALSE(ValidateUtf8("ab\xE2\x82").ok());        // truncated
  EXPECT_FALSE(ValidateUtf8("\x80").ok());              // stray continuation byte
}

TEST(TextUtilTest, ByteLevelAlphabet) {
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteToUnicode('a'), static_cast<uint32_t>('a'));
  std::string all;
  for (int b = 0; b < 256; ++b) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &all);
  std::string bytes;
  ASSERT_TRUE(ByteLevelToBytes(all, &bytes));
  ASSERT_EQ(bytes.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(static_cast<uint8_t>(bytes[b]), b);
  EXPECT_FALSE(ByteLevelToBytes("\xE2\x96\x81", &bytes));  // '▁' is not in the alphabet
}

}  // namespace
}  // namespace tokenizer_internal
}  // namespace scored
