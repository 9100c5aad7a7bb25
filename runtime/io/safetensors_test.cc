// The safetensors reader must reject every malformed file with a clear message and never
// read outside the file; the writer must round-trip.
#include "runtime/io/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "runtime/io/sha256.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::io {
namespace {

std::vector<std::byte> image(const std::string& header, std::size_t data_bytes, std::uint64_t claimed_len = ~0ull) {
  const std::uint64_t n = claimed_len == ~0ull ? header.size() : claimed_len;
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0});
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("shardlab_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  ASSERT_TRUE(write_file_atomic(path, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())).is_ok());
}

// The in-memory parser's message; the same image as a file must fail with the same one
// through read_safetensors and through SafetensorsReader (header checks shared).
std::string error_of(const std::vector<std::byte>& bytes) {
  auto r = parse_safetensors("x.safetensors", bytes);
  EXPECT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string path = temp_path("x.safetensors");
  write_bytes(path, bytes);
  auto whole = read_safetensors(path);
  auto reader = SafetensorsReader::open(path);
  std::filesystem::remove(path);
  EXPECT_FALSE(whole.is_ok());
  EXPECT_FALSE(reader.is_ok());
  const auto as_file = [&](const std::string& m) {  // the messages start with the path
    const std::string prefix = "x.safetensors: ";
    return m.rfind(prefix, 0) == 0 ? path + ": " + m.substr(prefix.size()) : m;
  };
  if (!r.is_ok() && !whole.is_ok() && !reader.is_ok()) {
    EXPECT_EQ(whole.status().message(), as_file(r.status().message()));
    EXPECT_EQ(reader.status().message(), as_file(r.status().message()));
  }
  return r.status().message();
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  SafetensorsFile f;
  f.metadata["loss"] = "0.5";
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI64}) {
    StoredTensor t;
    t.name = std::string("t_") + std::string(dtype_name(d));
    t.dtype = d;
    t.shape = {2, 3};
    t.data.resize(6 * element_size(d));
    for (std::size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<std::byte>(i * 7 + 1);
    f.tensors.push_back(t);
  }
  StoredTensor empty;
  empty.name = "empty";
  empty.shape = {0, 4};
  f.tensors.push_back(empty);
  const std::string path = (std::filesystem::temp_directory_path() / "shardlab_roundtrip.safetensors").string();
  ASSERT_TRUE(write_safetensors(path, f).is_ok());
  auto back = read_safetensors(path);
  std::filesystem::remove(path);
  ASSERT_THAT(back, IsOk());
  ASSERT_EQ(back->tensors.size(), f.tensors.size());
  for (std::size_t i = 0; i < f.tensors.size(); ++i) {
    EXPECT_EQ(back->tensors[i].name, f.tensors[i].name);
    EXPECT_EQ(back->tensors[i].dtype, f.tensors[i].dtype);
    EXPECT_EQ(back->tensors[i].shape, f.tensors[i].shape);
    EXPECT_EQ(back->tensors[i].data, f.tensors[i].data);
  }
  EXPECT_EQ(back->metadata.at("loss"), "0.5");
}

TEST(Safetensors, RejectsATruncatedLengthPrefix) {
  EXPECT_NE(error_of(std::vector<std::byte>(5)).find("file is 5 bytes"), std::string::npos);
}

TEST(Safetensors, RejectsAHeaderLengthLargerThanTheFile) {
  EXPECT_NE(error_of(image("{}", 0, 1000)).find("header length 1000 exceeds the 2 bytes"), std::string::npos);
  EXPECT_NE(error_of(image("{}", 0, ~0ull - 1)).find("exceeds"), std::string::npos);
}

TEST(Safetensors, RejectsAHeaderThatIsNotAJsonObject) {
  EXPECT_NE(error_of(image("{\"a\": ", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(image("[1, 2]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(image(std::string("\xff\xfe\x00garbage", 10), 0)).find("not a JSON object"), std::string::npos);
}

TEST(Safetensors, RejectsUnknownDtypes) {
  const auto msg = error_of(image(R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", 1));
  EXPECT_NE(msg.find("tensor 'w': unknown dtype 'F8_E4M3'; allowed: F32, BF16, F16, I64, I32"), std::string::npos)
      << msg;
}

TEST(Safetensors, RejectsOffsetsOutOfRange) {
  const auto msg = error_of(image(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8));
  EXPECT_NE(msg.find("data_offsets [0, 16] are outside the 8 data bytes"), std::string::npos) << msg;
  EXPECT_NE(error_of(image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8)).find("outside"),
            std::string::npos);
  EXPECT_NE(
      error_of(image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-1, 4]}})", 8)).find("non-negative"),
      std::string::npos);
}

TEST(Safetensors, RejectsOverlapsGapsAndTrailingBytes) {
  EXPECT_NE(error_of(image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                           8))
                .find("overlaps"),
            std::string::npos);
  EXPECT_NE(
      error_of(image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)).find("gap of 4 bytes"),
      std::string::npos);
  EXPECT_NE(
      error_of(image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8)).find("4 trailing bytes"),
      std::string::npos);
}

TEST(Safetensors, RejectsAShapeThatDisagreesWithTheByteLength) {
  const auto msg = error_of(image(R"({"w": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [0, 8]}})", 8));
  EXPECT_NE(msg.find("shape [3, 2] × BF16 needs 12 bytes but data_offsets span 8"), std::string::npos) << msg;
  const auto huge =
      error_of(image(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 8]}})", 8));
  EXPECT_NE(huge.find("2^63"), std::string::npos) << huge;
  EXPECT_NE(error_of(image(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4))
                .find("non-negative integers"),
            std::string::npos);
}

TEST(Safetensors, RejectsMalformedEntriesAndMetadata) {
  EXPECT_NE(error_of(image(R"({"w": 3})", 0)).find("expected an object with dtype, shape and data_offsets"),
            std::string::npos);
  EXPECT_NE(error_of(image(R"({"__metadata__": {"k": 1}})", 0)).find("not a string"), std::string::npos);
}

TEST(Safetensors, WidensI32ToI64) {
  auto img = image(R"({"ids": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})", 8);
  const std::int32_t v[2] = {-3, 70000};
  std::memcpy(img.data() + img.size() - 8, v, 8);
  auto f = parse_safetensors("ids.safetensors", img);
  ASSERT_THAT(f, IsOk());
  std::int64_t w[2];
  std::memcpy(w, f->tensors[0].data.data(), 16);
  EXPECT_EQ(w[0], -3);
  EXPECT_EQ(w[1], 70000);
}

TEST(Safetensors, ReaderReadsEachTensorIntoTheCallersBuffer) {
  SafetensorsFile f;
  f.metadata["k"] = "v";
  for (int i = 0; i < 3; ++i) {
    StoredTensor t;
    t.name = "t" + std::to_string(i);
    t.shape = {i + 1, 2};
    t.data.resize(static_cast<std::size_t>((i + 1) * 2 * 4));
    for (std::size_t b = 0; b < t.data.size(); ++b) t.data[b] = static_cast<std::byte>(b * 13 + i);
    f.tensors.push_back(t);
  }
  std::vector<TensorRef> refs;
  for (const auto& t : f.tensors) refs.push_back({t.name, t.dtype, t.shape, t.data});
  const std::string path = temp_path("refs.safetensors");
  ASSERT_TRUE(write_safetensors(path, refs, f.metadata).is_ok());
  // Written from the callers' buffers, the file is byte for byte the serialized image.
  auto raw = read_file(path);
  ASSERT_TRUE(raw.is_ok());
  EXPECT_EQ(*raw, serialize_safetensors(f));
  auto r = SafetensorsReader::open(path);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->metadata(), f.metadata);
  ASSERT_EQ(r->tensors().size(), 3u);
  const TensorEntry* t1 = r->find("t1");
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->shape, (Shape{2, 2}));
  std::vector<std::byte> out(16);
  ASSERT_TRUE(r->read(*t1, out).is_ok());
  EXPECT_EQ(out, f.tensors[1].data);
  std::vector<std::byte> small(15);
  const Status wrong = r->read(*t1, small);
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("tensor 't1' holds 16 bytes; the destination has 15"), std::string::npos)
      << wrong.message();
  // A file cut short after its header was read: an error naming the file, never a read past its end.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(raw->size() - 4)), 0);
  std::vector<std::byte> last(24);
  const Status cut = r->read(r->tensors()[2], last);
  std::filesystem::remove(path);
  EXPECT_EQ(cut.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.message().find(path + ": read error (it shrank while being read)"), std::string::npos) << cut.message();
}

TEST(Safetensors, AMissingFileNamesThePath) {
  auto r = read_safetensors("/nonexistent/dir/model.safetensors");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("/nonexistent/dir/model.safetensors: cannot open"), std::string::npos);
}

// FIPS 180-4 test vectors.
TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// NOTE [Safe file input] / [Safe file output].
TEST(SafeFiles, SpecialFilesAreRefusedWithoutBlockingOrReplacing) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("shardlab_safe_files_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto r = read_file(fifo);  // a plain open() would block here forever
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("is a FIFO"), std::string::npos) << r.status().message();
  auto d = read_file(dir);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos) << d.status().message();
  auto z = read_file("/dev/zero");
  ASSERT_FALSE(z.is_ok());
  EXPECT_NE(z.status().message().find("is a character device"), std::string::npos) << z.status().message();
  ASSERT_TRUE(write_file_atomic(dir + "/small", "12345").is_ok());
  auto big = read_file(dir + "/small", 4);
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("is 5 bytes; allowed: at most 4"), std::string::npos) << big.status().message();
  EXPECT_EQ(*read_file(dir + "/small", 5), "12345");
  // Writing never replaces a FIFO, a device or a link.
  EXPECT_EQ(write_file_atomic(fifo, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_file_atomic("/dev/null", "x").code(), StatusCode::kInvalidArgument);
  std::filesystem::create_symlink(dir + "/small", dir + "/link");
  EXPECT_EQ(write_file_atomic(dir + "/link", "x").code(), StatusCode::kInvalidArgument);
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardlab::runtime::io
