// ReadRecordsByIndex: TFRecord payloads of a record set by global record number, one batch per
// call, without Python. A record is read as its whole frame (length, length CRC, payload,
// payload CRC), each frame checked alone: frames that follow each other in their shard (the
// batch sorted by shard and offset) come with one pread of the run, and their payloads are
// copied to their places in the batch; a record alone is one pread into its output string, the
// payload then moved to the front (`coalesce=false`: every record alone). The offset index
// (int64 [N, 3]: shard, frame offset, payload length) is mapped, not loaded, so memory does not
// grow with the number of records; each call copies its batch's rows out of the mapping under the
// SIGBUS guard below, so an index cut short in place under the kernel fails the call (DataLoss)
// instead of killing the process. A frame that does not fit in its shard (size taken once, at
// construction) is damaged and never read: nothing is allocated for the length a damaged index
// claims.
//
// A kernel is made each time its function is instantiated (every epoch of a tf.data pipeline), and
// opens the files by path then: with `run_id` it first checks that the run's `summary.json` still
// commits that run and that every shard has the size that run wrote (`shard_bytes`), so a reader
// never serves another run's files under the index it opened (a folder overwritten between epochs).
//
// With `map_shards` the shards are mapped instead, and each frame is checked and its payload copied
// straight out of the mapping: no system call per record once the pages are mapped, at the price
// of the shard pages read counting in the process's resident memory (page cache, which the kernel
// takes back under pressure). A shard truncated while mapped turns a read past its new end into
// SIGBUS; the copy runs under a guard that turns that into a damaged frame, as a short pread is.
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <nmmintrin.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
// The portable CRC32C: TensorFlow's own wrapper, at the same path in 2.16 and 2.21 (tsl moved).
#include "tensorflow/core/lib/hash/crc32c.h"
// The run a summary.json commits, read as the Python reader reads it (json.loads).
#include "summary_json.h"

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
// The most bytes one pread of adjacent frames takes (a run longer than this is cut).
constexpr int64_t kMaxRunBytes = 4 << 20;

// The crc32 register after `len` zero bytes (len a multiple of 8), from `reg`.
__attribute__((target("sse4.2"))) uint32_t AfterZeros(uint32_t reg, size_t len) {
  uint64_t crc = reg;
  for (size_t at = 0; at < len; at += 8) crc = _mm_crc32_u64(crc, 0);
  return static_cast<uint32_t>(crc);
}

// What `len` zero bytes do to a CRC32C register. CRC arithmetic is linear over GF(2), so the
// register after them is the XOR of what they do to each byte of the register before: four
// tables of 256, filled once by running the crc32 instruction over zeros from each byte value.
struct ZerosTable {
  uint32_t byte[4][256];
  explicit ZerosTable(size_t len) {
    for (int k = 0; k < 4; ++k) {
      for (uint32_t n = 0; n < 256; ++n) byte[k][n] = AfterZeros(n << (8 * k), len);
    }
  }
  uint32_t Shift(uint32_t crc) const {
    return byte[0][crc & 0xff] ^ byte[1][(crc >> 8) & 0xff] ^ byte[2][(crc >> 16) & 0xff] ^
           byte[3][crc >> 24];
  }
};

// Three streams of this many bytes run side by side: one crc32 instruction has a latency of 3
// cycles and a throughput of 1, so one chain alone uses a third of the unit.
constexpr size_t kCrcBlock = 256;

__attribute__((target("sse4.2"))) uint64_t Crc32cWords(uint64_t crc, const char* data,
                                                       size_t n) {
  for (; n >= 8; n -= 8, data += 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    crc = _mm_crc32_u64(crc, word);
  }
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const char* data, size_t n) {
  static const ZerosTable* const kShiftBlock = new ZerosTable(kCrcBlock);
  uint64_t crc = 0xffffffffu;
  while (n >= 3 * kCrcBlock) {
    uint64_t crc1 = 0, crc2 = 0;
    for (size_t at = 0; at < kCrcBlock; at += 8) {
      uint64_t words[3];
      std::memcpy(&words[0], data + at, 8);
      std::memcpy(&words[1], data + kCrcBlock + at, 8);
      std::memcpy(&words[2], data + 2 * kCrcBlock + at, 8);
      crc = _mm_crc32_u64(crc, words[0]);
      crc1 = _mm_crc32_u64(crc1, words[1]);
      crc2 = _mm_crc32_u64(crc2, words[2]);
    }
    crc = kShiftBlock->Shift(static_cast<uint32_t>(crc)) ^ static_cast<uint32_t>(crc1);
    crc = kShiftBlock->Shift(static_cast<uint32_t>(crc)) ^ static_cast<uint32_t>(crc2);
    data += 3 * kCrcBlock;
    n -= 3 * kCrcBlock;
  }
  crc = Crc32cWords(crc, data, n);
  data += n & ~size_t{7};
  n &= 7;
  uint32_t crc32 = static_cast<uint32_t>(crc);
  while (n-- > 0) crc32 = _mm_crc32_u8(crc32, static_cast<uint8_t>(*data++));
  return ~crc32;
}

// TensorFlow's own CRC32C is portable C; the SSE4.2 instruction is several times faster.
const bool kHardwareCrc = __builtin_cpu_supports("sse4.2");

uint32_t MaskedCrc32c(const char* data, size_t n) {
  const uint32_t crc =
      kHardwareCrc ? Crc32cHardware(data, n) : tensorflow::crc32c::Value(data, n);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

// The guard of the copy out of a mapped file (a shard or the offset index) running on this
// thread, or null. Initial-exec TLS (no allocation on first use), so the signal handler may read
// it.
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* t_mapped_copy_guard = nullptr;
struct sigaction previous_sigbus_action;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  sigjmp_buf* guard = t_mapped_copy_guard;
  if (guard != nullptr) siglongjmp(*guard, 1);
  // Not a guarded copy: the action installed before ours handles it (Python's faulthandler, say).
  const struct sigaction& previous = previous_sigbus_action;
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
  } else {
    // The default action: put it back; the faulting access runs again and ends the process
    // with SIGBUS, as it would without this handler.
    sigaction(SIGBUS, &previous, nullptr);
  }
}

void InstallSigbusGuard() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action = {};
    action.sa_sigaction = OnSigbus;
    // SA_NODEFER: the handler leaves by siglongjmp without restoring the signal mask (a system
    // call a record), so SIGBUS must not be blocked while it runs.
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &previous_sigbus_action);
  });
}

// Runs `read`, whose reads of mapped files return whether what it read is good, under the guard:
// false if a page it touched is gone (the file cut short under its mapping), else what it
// returns.
template <typename Read>
bool Guarded(const Read& read) {
  sigjmp_buf guard;
  if (sigsetjmp(guard, /*savemask=*/0) != 0) {
    t_mapped_copy_guard = nullptr;
    return false;
  }
  t_mapped_copy_guard = &guard;
  // Keep the compiler from moving the mapped reads out from under the guard.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  const bool good = read();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_mapped_copy_guard = nullptr;
  return good;
}

class ReadRecordsByIndexOp : public OpKernel {
 public:
  explicit ReadRecordsByIndexOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<std::string> shard_paths;
    int64_t header_bytes;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shard_paths", &shard_paths));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("offsets_path", &offsets_path_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("offsets_header_bytes", &header_bytes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_records", &num_records_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("verify_crc", &verify_crc_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("coalesce", &coalesce_));
    bool map_shards;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("map_shards", &map_shards));
    std::vector<int64_t> expected_bytes;
    std::string run_id, summary_path;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shard_bytes", &expected_bytes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("run_id", &run_id));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("summary_path", &summary_path));
    OP_REQUIRES(ctx, header_bytes >= 0 && num_records_ >= 0,
                errors::InvalidArgument("offsets_header_bytes and num_records must be >= 0"));
    OP_REQUIRES(ctx, expected_bytes.empty() || expected_bytes.size() == shard_paths.size(),
                errors::InvalidArgument("shard_bytes must be empty or one size per shard"));
    if (!run_id.empty()) {
      const summary_json::Commit commit = summary_json::ReadCommit(summary_path);
      std::string now;  // what the summary says now, when it no longer commits the run
      if (!commit.problem.empty()) {
        now = commit.problem;
      } else if (!commit.has_run_id) {
        now = "now commits no run";
      } else if (commit.run_id != run_id) {
        now = "now commits run " + commit.run_id;
      } else if (!commit.ok) {
        now = "now says the run failed";
      }
      OP_REQUIRES(ctx, now.empty(),
                  errors::FailedPrecondition(
                      "the record store was opened on run ", run_id, " but ", summary_path, " ",
                      now, ": the folder was overwritten or is being written; open the run again"));
    }
    struct stat info;
    for (const std::string& path : shard_paths) {
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      OP_REQUIRES(ctx, fd >= 0,
                  errors::NotFound("cannot open shard ", path, ": ", std::strerror(errno)));
      fds_.push_back(fd);
      OP_REQUIRES(ctx, fstat(fd, &info) == 0,
                  errors::Internal("cannot stat shard ", path, ": ", std::strerror(errno)));
      shard_bytes_.push_back(static_cast<int64_t>(info.st_size));
      const int64_t expected =
          expected_bytes.empty() ? shard_bytes_.back() : expected_bytes[shard_bytes_.size() - 1];
      OP_REQUIRES(ctx, shard_bytes_.back() == expected,
                  errors::FailedPrecondition("shard ", path, " holds ", shard_bytes_.back(),
                                             " bytes, but run ", run_id, " wrote ", expected,
                                             ": it was replaced since the store was opened"));
      if (map_shards) {
        void* mapped = shard_bytes_.back() == 0 ? nullptr
                                                : mmap(nullptr, shard_bytes_.back(), PROT_READ,
                                                       MAP_SHARED, fd, 0);
        OP_REQUIRES(ctx, mapped != MAP_FAILED,
                    errors::Internal("cannot map shard ", path, ": ", std::strerror(errno)));
        // Records are read in a random order: no read-around of the pages beside each one.
        if (mapped != nullptr) madvise(mapped, shard_bytes_.back(), MADV_RANDOM);
        shard_maps_.push_back(static_cast<const char*>(mapped));
      }
    }
    InstallSigbusGuard();
    const int index_fd = open(offsets_path_.c_str(), O_RDONLY | O_CLOEXEC);
    OP_REQUIRES(ctx, index_fd >= 0,
                errors::NotFound("cannot open offset index ", offsets_path_, ": ",
                                 std::strerror(errno)));
    const int64_t size = fstat(index_fd, &info) == 0 ? static_cast<int64_t>(info.st_size) : -1;
    // Compared as (size - header) / 24 so that a huge num_records cannot overflow the product.
    constexpr int64_t kRowBytes = 3 * static_cast<int64_t>(sizeof(int64_t));
    if (size < header_bytes || (size - header_bytes) / kRowBytes < num_records_) {
      close(index_fd);
      ctx->CtxFailure(errors::InvalidArgument("offset index ", offsets_path_, " holds ", size,
                                              " bytes, fewer than ", header_bytes, " + ",
                                              num_records_, " rows of ", kRowBytes));
      return;
    }
    mapped_bytes_ = static_cast<size_t>(info.st_size);
    if (mapped_bytes_ > 0) {
      void* mapped = mmap(nullptr, mapped_bytes_, PROT_READ, MAP_SHARED, index_fd, 0);
      close(index_fd);
      OP_REQUIRES(ctx, mapped != MAP_FAILED,
                  errors::Internal("cannot map ", offsets_path_, ": ", std::strerror(errno)));
      mapped_ = mapped;
      rows_ = reinterpret_cast<const int64_t*>(static_cast<const char*>(mapped) + header_bytes);
    } else {
      close(index_fd);
    }
  }

  ~ReadRecordsByIndexOp() override {
    for (const int fd : fds_) close(fd);
    for (size_t shard = 0; shard < shard_maps_.size(); ++shard) {
      if (shard_maps_[shard] != nullptr) {
        munmap(const_cast<char*>(shard_maps_[shard]), shard_bytes_[shard]);
      }
    }
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
    std::vector<Row> rows(count);
    OP_REQUIRES(ctx, CopyRows(indices.data(), count, rows.data()),
                errors::DataLoss("offset index ", offsets_path_,
                                 " was cut short under this reader (a page of its rows is gone):"
                                 " the run was overwritten in place; open it again"));
    for (int64_t i = 0; i < count; ++i) {
      // RecordStore.open checks every row; a bad one here means the index changed since.
      const Row& row = rows[i];
      OP_REQUIRES(ctx,
                  row.shard >= 0 && row.shard < static_cast<int64_t>(fds_.size()) &&
                      row.offset >= 0 && row.length >= 0,
                  errors::DataLoss("offset index ", offsets_path_, ": record ", indices(i),
                                   " has shard ", row.shard, " (of ", fds_.size(), "), offset ",
                                   row.offset, ", length ", row.length));
    }
    Tensor* records_tensor = nullptr;
    Tensor* ok_tensor = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({count}), &records_tensor));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({count}), &ok_tensor));
    auto records = records_tensor->vec<tstring>();
    auto ok = ok_tensor->vec<bool>();
    const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    if (!shard_maps_.empty()) {
      auto read_range = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) ok(i) = ReadMapped(rows[i], &records(i));
      };
      // Shard's cost hint: a copy and a CRC, without the pread path's system call.
      ::tensorflow::Shard(workers->num_threads, workers->workers, count, /*cost_per_unit=*/4000,
                          read_range);
      return;
    }
    if (!coalesce_) {
      auto read_range = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) ok(i) = ReadOne(rows[i], &records(i));
      };
      // Page-cached reads cost a few microseconds each, mostly in the kernel: spread them over
      // the intra-op threads.
      ::tensorflow::Shard(workers->num_threads, workers->workers, count, /*cost_per_unit=*/20000,
                          read_range);
      return;
    }
    // The batch in (shard, offset) order, cut into runs of frames that follow each other in
    // their shard: one pread a run, then each frame checked on its own and its payload put back
    // at its place in the batch.
    std::vector<int64_t> order(count);
    for (int64_t i = 0; i < count; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return rows[a].shard != rows[b].shard ? rows[a].shard < rows[b].shard
                                            : rows[a].offset < rows[b].offset;
    });
    std::vector<int64_t> run_starts;
    int64_t run_end = -1, run_shard = -1, run_begin = 0;
    for (int64_t k = 0; k < count; ++k) {
      const Row& row = rows[order[k]];
      const bool fits = Fits(row);
      const bool follows = fits && row.shard == run_shard && row.offset == run_end &&
                           row.offset + row.length + kOverheadBytes - run_begin <= kMaxRunBytes;
      if (!follows) {
        run_starts.push_back(k);
        run_begin = row.offset;
      }
      // A frame that does not fit ends its run and is read (refused) alone.
      run_shard = fits ? row.shard : -1;
      run_end = fits ? row.offset + row.length + kOverheadBytes : -1;
    }
    const int64_t num_runs = static_cast<int64_t>(run_starts.size());
    run_starts.push_back(count);
    auto read_runs = [&](int64_t begin, int64_t end) {
      std::string buffer;
      for (int64_t r = begin; r < end; ++r) {
        const int64_t first = run_starts[r], last = run_starts[r + 1];
        if (last - first == 1) {
          ok(order[first]) = ReadOne(rows[order[first]], &records(order[first]));
          continue;
        }
        const Row& first_row = rows[order[first]];
        const Row& last_row = rows[order[last - 1]];
        const int64_t start = first_row.offset;
        const int64_t bytes = last_row.offset + last_row.length + kOverheadBytes - start;
        buffer.resize(bytes);
        const ssize_t got = pread(fds_[first_row.shard], &buffer[0], bytes, start);
        for (int64_t k = first; k < last; ++k) {
          const int64_t i = order[k];
          const int64_t at = rows[i].offset - start, length = rows[i].length;
          // A short read damages the frames it does not hold, as a short read of one would.
          const bool whole = got >= 0 && at + length + kOverheadBytes <= got;
          ok(i) = whole && FrameIsGood(buffer.data() + at, length);
          if (ok(i)) {
            records(i).resize_uninitialized(length);
            std::memcpy(records(i).mdata(), buffer.data() + at + kHeaderBytes, length);
          } else {
            records(i).clear();
          }
        }
      }
    };
    ::tensorflow::Shard(workers->num_threads, workers->workers, num_runs,
                        /*cost_per_unit=*/20000, read_runs);
  }

 private:
  // One row of the offset index: the record's shard, its frame's offset and its payload length.
  struct Row {
    int64_t shard, offset, length;
  };
  static_assert(sizeof(Row) == 3 * sizeof(int64_t), "a Row is one row of the index");

  // The rows of records `indices` (each in range) copied out of the mapped index into `rows`,
  // under the SIGBUS guard: false if a page of them is gone (the index cut short in place).
  bool CopyRows(const int64_t* indices, int64_t count, Row* rows) const {
    return Guarded([&] {
      for (int64_t i = 0; i < count; ++i) {
        std::memcpy(&rows[i], rows_ + 3 * indices[i], sizeof(Row));
      }
      return true;
    });
  }

  // The frame of `row` must fit in its shard before anything is allocated for it. In this order
  // no difference overflows: offset and length are >= 0 and `room` >= -16.
  bool Fits(const Row& row) const {
    const int64_t room = shard_bytes_[row.shard] - kOverheadBytes;
    return row.offset <= room && row.length <= room - row.offset;
  }

  // The whole frame read at `frame`: its length field says `length`, and (with verify_crc) both
  // CRCs match.
  bool FrameIsGood(const char* frame, int64_t length) const {
    uint64_t stored_length;
    std::memcpy(&stored_length, frame, sizeof(stored_length));
    if (stored_length != static_cast<uint64_t>(length)) return false;
    if (!verify_crc_) return true;
    uint32_t length_crc, payload_crc;
    std::memcpy(&length_crc, frame + 8, sizeof(length_crc));
    std::memcpy(&payload_crc, frame + kHeaderBytes + length, sizeof(payload_crc));
    return length_crc == MaskedCrc32c(frame, 8) &&
           payload_crc == MaskedCrc32c(frame + kHeaderBytes, length);
  }

  // Reads the record of `row` (checked by Compute) into `out` and checks its frame; false (and
  // `out` empty) if damaged.
  bool ReadOne(const Row& row, tstring* out) const {
    const int64_t shard = row.shard, offset = row.offset, length = row.length;
    if (!Fits(row)) {
      out->clear();
      return false;
    }
    const int64_t frame_bytes = length + kOverheadBytes;
    out->resize_uninitialized(frame_bytes);
    char* frame = out->mdata();
    const ssize_t got = pread(fds_[shard], frame, frame_bytes, offset);
    const bool good = got == frame_bytes && FrameIsGood(frame, length);
    if (!good) {
      out->clear();
      return false;
    }
    std::memmove(frame, frame + kHeaderBytes, length);
    out->resize(length);
    return true;
  }

  // The record of `row` (checked by Compute) checked and copied out of its mapped shard; false
  // (and `out` empty) if damaged, or if the shard was truncated under the mapping.
  bool ReadMapped(const Row& row, tstring* out) const {
    if (!Fits(row)) {
      out->clear();
      return false;
    }
    out->resize_uninitialized(row.length);
    if (!CopyMappedFrame(shard_maps_[row.shard] + row.offset, row.length, out->mdata())) {
      out->clear();
      return false;
    }
    return true;
  }

  // FrameIsGood on the mapped `frame`, then its payload copied to `payload`, under the SIGBUS
  // guard: false if the frame is damaged or a page of it is gone.
  bool CopyMappedFrame(const char* frame, int64_t length, char* payload) const {
    return Guarded([&] {
      const bool good = FrameIsGood(frame, length);
      if (good) std::memcpy(payload, frame + kHeaderBytes, length);
      return good;
    });
  }

  std::string offsets_path_;
  std::vector<int> fds_;
  std::vector<const char*> shard_maps_;  // with map_shards: each shard mapped whole
  std::vector<int64_t> shard_bytes_;  // sizes at construction: shards are written once
  void* mapped_ = nullptr;
  size_t mapped_bytes_ = 0;
  const int64_t* rows_ = nullptr;
  int64_t num_records_ = 0;
  bool verify_crc_ = true;
  bool coalesce_ = true;
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
    .Attr("coalesce: bool = true")
    .Attr("map_shards: bool = false")
    .Attr("shard_bytes: list(int) = []")
    .Attr("run_id: string = ''")
    .Attr("summary_path: string = ''")
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
ok: bool [B] false where the frame does not fit in its shard (a truncated shard or a damaged
  index: nothing is read or allocated for it), is truncated, its length disagrees with the index,
  or (with verify_crc) a CRC does not match. A row of the index that names no shard or holds a
  negative offset or length fails the call (DataLoss, naming the record), and so does an index cut
  short in place under the kernel (a page of its rows gone).
coalesce: read frames that follow each other in a shard with one pread (each still checked
  alone); false: one pread a record.
map_shards: map each shard and copy the frames out of the mapping (no pread; coalesce unused).
  A shard truncated while mapped reads as damaged frames past its new end.
shard_bytes: the size of each shard when the store was opened; a shard of another size fails the
  kernel's construction (FailedPrecondition). Empty: not checked.
run_id, summary_path: the run the store was opened on and its summary.json; when run_id is set,
  a summary that commits another run (or none, or says it failed) fails the kernel's
  construction. The summary is read as JSON, as the Python reader reads it (any layout).
)doc");

REGISTER_KERNEL_BUILDER(Name("ReadRecordsByIndex").Device(DEVICE_CPU), ReadRecordsByIndexOp);

}  // namespace tfx_dynamic_inputs
