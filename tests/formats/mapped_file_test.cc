// MappedFile: read-only mappings, empty files, and errors that name the path.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mapped_file.h"
#include "format_test_util.h"
#include "testing/paths.h"

namespace icecache {
namespace {

TEST(MappedFileTest, MapsContents) {
  const std::string dir = testing::MakeTempDir("mapped");
  const std::vector<uint8_t> bytes = {1, 2, 3, 250, 0, 7};
  testing::WriteBytes(dir + "/f.bin", bytes);
  auto r = MappedFile::Open(dir + "/f.bin");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const MappedFile& f = **r;
  EXPECT_EQ(f.path(), dir + "/f.bin");
  ASSERT_EQ(f.size(), bytes.size());
  EXPECT_EQ(std::vector<uint8_t>(f.bytes().begin(), f.bytes().end()), bytes);
  EXPECT_EQ(f.data()[3], 250);
}

TEST(MappedFileTest, EmptyFileMapsAsSizeZero) {
  const std::string dir = testing::MakeTempDir("mapped");
  testing::WriteBytes(dir + "/empty", {});
  auto r = MappedFile::Open(dir + "/empty");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->size(), 0u);
  EXPECT_TRUE((*r)->bytes().empty());
}

TEST(MappedFileTest, MissingFileNamesPathAndSystemError) {
  auto r = MappedFile::Open("/no/such/file.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  testing::ExpectErrorMentions(r.status(), {"/no/such/file.gguf", "No such file or directory"});
}

TEST(MappedFileTest, DirectoryIsRefused) {
  const std::string dir = testing::MakeTempDir("mapped");
  testing::ExpectErrorMentions(MappedFile::Open(dir).status(), {dir, "is a directory"});
}

TEST(MappedFileTest, UnreadableFileNamesPermissionError) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files regardless of permissions";
  const std::string dir = testing::MakeTempDir("mapped");
  testing::WriteBytes(dir + "/secret", {1});
  ASSERT_EQ(chmod((dir + "/secret").c_str(), 0), 0);
  testing::ExpectErrorMentions(MappedFile::Open(dir + "/secret").status(),
                               {dir + "/secret", "Permission denied"});
}

}  // namespace
}  // namespace icecache
