// WriteFileBytes replaces a file at once: the new contents, or on failure the old file
// untouched, and never a leftover temporary file.
#include "core/write_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "testing/paths.h"

namespace icecache {
namespace {

namespace fs = std::filesystem;

int FilesIn(const std::string& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(WriteFileTest, CreatesAndReplacesWithThePlainCreateMode) {
  const std::string dir = testing::MakeTempDir("write_file");
  const std::string path = dir + "/out.md";
  ASSERT_TRUE(WriteFileText(path, "first version\n").ok());
  EXPECT_EQ(testing::ReadFileText(path), "first version\n");
  ASSERT_TRUE(WriteFileText(path, "second").ok());
  EXPECT_EQ(testing::ReadFileText(path), "second");
  ASSERT_TRUE(WriteFileText(path, "").ok());
  EXPECT_EQ(testing::ReadFileText(path), "");
  EXPECT_EQ(FilesIn(dir), 1);  // no temporary file left beside it
  const mode_t mask = umask(022);
  umask(mask);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

// A write cut short (here by the process's file size limit, as by a full disk) is an IoError
// that names the file, and the file keeps its earlier contents.
TEST(WriteFileTest, AFailedWriteKeepsTheOldFile) {
  const std::string dir = testing::MakeTempDir("write_file");
  const std::string path = dir + "/summary.md";
  ASSERT_TRUE(WriteFileText(path, "the old summary\n").ok());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  ASSERT_TRUE(old.rlim_cur == RLIM_INFINITY || old.rlim_cur > 4096);
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
  rlimit small = old;
  small.rlim_cur = 1000;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status s = WriteFileText(path, std::string(4000, 'x'));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(path + ": write failed"), std::string::npos) << s.message();
  EXPECT_EQ(testing::ReadFileText(path), "the old summary\n");
  EXPECT_EQ(FilesIn(dir), 1);
}

// A symbolic link is written through (renaming over it would replace the link itself).
TEST(WriteFileTest, ALinkIsWrittenThroughAndStaysALink) {
  const std::string dir = testing::MakeTempDir("write_file");
  const std::string target = dir + "/target.md", link = dir + "/link.md";
  ASSERT_TRUE(WriteFileText(target, "old").ok());
  fs::create_symlink(target, link);
  ASSERT_TRUE(WriteFileText(link, "new contents").ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(testing::ReadFileText(target), "new contents");
  EXPECT_EQ(FilesIn(dir), 2);
}

TEST(WriteFileTest, AMissingFolderIsAnErrorNamingThePath) {
  const std::string path = testing::MakeTempDir("write_file") + "/no/such/folder/out.md";
  const Status s = WriteFileText(path, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(path + ": cannot create"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace icecache
