#include "engine/base/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace scored {
namespace {

// NIST FIPS 180-4 / CAVP example vectors.
TEST(Sha256Test, NistVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnop"
                      "qrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalEqualsOneShotAtEveryBoundary) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7 + 1));
  for (size_t len : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 128u, 300u}) {
    const std::string want = Sha256Hex(std::string_view(data).substr(0, len));
    for (size_t split = 0; split <= len; split += 13) {
      Sha256 h;
      h.Update(data.data(), split);
      h.Update(data.data() + split, len - split);
      EXPECT_EQ(h.HexDigest(), want) << len << " " << split;
    }
  }
  Sha256 h;
  h.Update("abc");
  const std::string once = h.HexDigest();
  EXPECT_EQ(h.HexDigest(), once);  // finishing twice gives the same digest
}

}  // namespace
}  // namespace scored
