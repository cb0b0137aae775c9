// ReadRecordsByIndex: TFRecord payloads of a record set by global record number, one batch per
// call, without Python. Each record is one pread of its whole frame (length, length CRC,
// payload, payload CRC) into the output string; the frame is checked and the payload moved to
// the front. The offset index (int64 [N, 3]: shard, frame offset, payload length) is mapped,
// not loaded, so memory does not grow with the number of records.
#include <fcntl.h>
#include <nmmintrin.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "tsl/lib/hash/crc32c.h"

namespace tfx_dynamic_inputs {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::tstring;
namespace errors = ::tensorflow::errors;

constexpr int64_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC of the length
constexpr int64_t kOverheadBytes = 16;  // + uint32 masked CRC of the payload
constexpr uint32_t kMaskDelta = 0xa282ead8u;

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const char* data, size_t n) {
  uint64_t crc = 0xffffffffu;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    crc = _mm_crc32_u64(crc, word);
    data += 8;
    n -= 8;
  }
  uint32_t crc32 = static_cast<uint32_t>(crc);
  while (n-- > 0) crc32 = _mm_crc32_u8(crc32, static_cast<uint8_t>(*data++));
  return ~crc32;
}

// TensorFlow's own CRC32C is portable C; the SSE4.2 instruction is several times faster.
const bool kHardwareCrc = __builtin_cpu_supports("sse4.2");

uint32_t MaskedCrc32c(const char* data, size_t n) {
  const uint32_t crc = kHardwareCrc ? Crc32cHardware(data, n) : tsl::crc32c::Value(data, n);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

class ReadRecordsByIndexOp : public OpKernel {
 public:
  explicit ReadRecordsByIndexOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<std::string> shard_paths;
    std::string offsets_path;
    int64_t header_bytes;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shard_paths", &shard_paths));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("offsets_path", &offsets_path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("offsets_header_bytes", &header_bytes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_records", &num_records_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("verify_crc", &verify_crc_));
    for (const std::string& path : shard_paths) {
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      OP_REQUIRES(ctx, fd >= 0,
                  errors::NotFound("cannot open shard ", path, ": ", std::strerror(errno)));
      fds_.push_back(fd);
    }
    const int index_fd = open(offsets_path.c_str(), O_RDONLY | O_CLOEXEC);
    OP_REQUIRES(ctx, index_fd >= 0,
                errors::NotFound("cannot open offset index ", offsets_path, ": ",
                                 std::strerror(errno)));
    struct stat info;
    const int64_t needed = header_bytes + num_records_ * 3 * static_cast<int64_t>(sizeof(int64_t));
    const int64_t size = fstat(index_fd, &info) == 0 ? static_cast<int64_t>(info.st_size) : -1;
    if (size < needed) {
      close(index_fd);
      ctx->CtxFailure(errors::InvalidArgument("offset index ", offsets_path, " holds ", size,
                                              " bytes, ", needed, " expected"));
      return;
    }
    mapped_bytes_ = static_cast<size_t>(info.st_size);
    if (mapped_bytes_ > 0) {
      void* mapped = mmap(nullptr, mapped_bytes_, PROT_READ, MAP_SHARED, index_fd, 0);
      close(index_fd);
      OP_REQUIRES(ctx, mapped != MAP_FAILED,
                  errors::Internal("cannot map ", offsets_path, ": ", std::strerror(errno)));
      mapped_ = mapped;
      rows_ = reinterpret_cast<const int64_t*>(static_cast<const char*>(mapped) + header_bytes);
    } else {
      close(index_fd);
    }
  }

  ~ReadRecordsByIndexOp() override {
    for (const int fd : fds_) close(fd);
    if (mapped_ != nullptr) munmap(mapped_, mapped_bytes_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& indices_tensor = ctx->input(0);
    OP_REQUIRES(ctx, indices_tensor.dims() == 1,
                errors::InvalidArgument("indices must be a vector, got shape ",
                                        indices_tensor.shape().DebugString()));
    const auto indices = indices_tensor.vec<int64_t>();
    const int64_t count = indices.size();
    for (int64_t i = 0; i < count; ++i) {
      OP_REQUIRES(ctx, indices(i) >= 0 && indices(i) < num_records_,
                  errors::InvalidArgument("record index ", indices(i),
                                          " out of range: num_records = ", num_records_));
    }
    Tensor* records_tensor = nullptr;
    Tensor* ok_tensor = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({count}), &records_tensor));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({count}), &ok_tensor));
    auto records = records_tensor->vec<tstring>();
    auto ok = ok_tensor->vec<bool>();
    auto read_range = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ok(i) = ReadOne(indices(i), &records(i));
    };
    // Page-cached reads cost a few microseconds each, mostly in the kernel: spread them over
    // the intra-op threads.
    const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    ::tensorflow::Shard(workers->num_threads, workers->workers, count, /*cost_per_unit=*/20000,
                        read_range);
  }

 private:
  // Reads record `index` into `out` and checks its frame; false (and `out` empty) if damaged.
  bool ReadOne(int64_t index, tstring* out) const {
    const int64_t* row = rows_ + 3 * index;
    const int64_t shard = row[0], offset = row[1], length = row[2];
    if (shard < 0 || shard >= static_cast<int64_t>(fds_.size()) || offset < 0 || length < 0) {
      return false;
    }
    const int64_t frame_bytes = length + kOverheadBytes;
    out->resize_uninitialized(frame_bytes);
    char* frame = out->mdata();
    const ssize_t got = pread(fds_[shard], frame, frame_bytes, offset);
    bool good = got == frame_bytes;
    if (good) {
      uint64_t stored_length;
      std::memcpy(&stored_length, frame, sizeof(stored_length));
      good = stored_length == static_cast<uint64_t>(length);
    }
    if (good && verify_crc_) {
      uint32_t length_crc, payload_crc;
      std::memcpy(&length_crc, frame + 8, sizeof(length_crc));
      std::memcpy(&payload_crc, frame + kHeaderBytes + length, sizeof(payload_crc));
      good = length_crc == MaskedCrc32c(frame, 8) &&
             payload_crc == MaskedCrc32c(frame + kHeaderBytes, length);
    }
    if (!good) {
      out->clear();
      return false;
    }
    std::memmove(frame, frame + kHeaderBytes, length);
    out->resize(length);
    return true;
  }

  std::vector<int> fds_;
  void* mapped_ = nullptr;
  size_t mapped_bytes_ = 0;
  const int64_t* rows_ = nullptr;
  int64_t num_records_ = 0;
  bool verify_crc_ = true;
};

}  // namespace

REGISTER_OP("ReadRecordsByIndex")
    .Input("indices: int64")
    .Output("records: string")
    .Output("ok: bool")
    .Attr("shard_paths: list(string)")
    .Attr("offsets_path: string")
    .Attr("offsets_header_bytes: int")
    .Attr("num_records: int")
    .Attr("verify_crc: bool = true")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle indices;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &indices));
      c->set_output(0, indices);
      c->set_output(1, indices);
      return ::tensorflow::OkStatus();
    })
    .Doc(R"doc(
Reads TFRecord payloads by global record number through a memory-mapped offset index.

indices: int64 [B] record numbers.
records: string [B] payloads; empty where the frame is damaged.
ok: bool [B] false where the frame is truncated, its length disagrees with the index, or (with
  verify_crc) a CRC does not match.
)doc");

REGISTER_KERNEL_BUILDER(Name("ReadRecordsByIndex").Device(DEVICE_CPU), ReadRecordsByIndexOp);

}  // namespace tfx_dynamic_inputs
