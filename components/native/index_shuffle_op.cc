// PermutePositions: where each position lands in the keyed random permutation of [0, size), one
// element at a time (`tfx_dynamic_inputs.inputs.index_shuffle`, whose TensorFlow-ops form this
// computes bit for bit, several times faster). Each element has its own size and 64-bit key (from
// the stateless seed and the element's tweak; a scalar size or tweak is every element's):
// an unbalanced Feistel network over the `bits`-bit numbers (2**bits the next power of two at
// or above the size), the high `bits - bits / 2` and low `bits / 2` bits taking turns to be
// xored with SplitMix64's finalizer of the other part and the round key (`rounds` rounds, or
// `small_rounds` where bits <= small_bits), then cycle walking until the value falls inside
// [0, size). Sizes up to `rank_max_size` take the rank of the position's keyed hash instead.
#include <algorithm>
#include <cstdint>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tfx_dynamic_inputs {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
namespace errors = ::tensorflow::errors;

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

inline uint64_t Mix(uint64_t value) {
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

// The keys of index_shuffle._element_key: the stateless seed's two words hashed into a base,
// then each element's key from the base and the element's tweak.
inline uint64_t SeedBase(const Tensor& seed) {
  const auto words = seed.flat<int64_t>();
  return Mix(Mix(static_cast<uint64_t>(words(0)) + kGolden) ^ static_cast<uint64_t>(words(1)));
}

inline uint64_t ElementKey(uint64_t base, int64_t tweak) {
  return Mix(base ^ Mix(static_cast<uint64_t>(tweak) + kGolden));
}

inline int BitWidth(uint64_t largest) { return largest == 0 ? 0 : 64 - __builtin_clzll(largest); }

inline uint64_t Feistel(uint64_t value, uint64_t key, int bits, int rounds) {
  const int low_bits = bits / 2;
  const uint64_t low_mask = (uint64_t{1} << low_bits) - 1;
  const uint64_t high_mask = (uint64_t{1} << (bits - low_bits)) - 1;
  uint64_t high = value >> low_bits;
  uint64_t low = value & low_mask;
  for (int round = 0; round < rounds; ++round) {
    const uint64_t round_key = key + static_cast<uint64_t>(round + 1) * kGolden;
    if (round % 2 == 0) {
      high ^= Mix(low ^ round_key) & high_mask;
    } else {
      low ^= Mix(high ^ round_key) & low_mask;
    }
  }
  return (high << low_bits) | low;
}

// The rank of `position`'s keyed hash among those of [0, size), ties by position: a uniform
// permutation for any size, at `size` hashes an element (cheaper than the rounds below 17).
inline uint64_t RankOfHash(uint64_t position, uint64_t size, uint64_t key) {
  const uint64_t own = Mix(key + (position + 1) * kGolden);
  uint64_t rank = 0;
  for (uint64_t other = 0; other < size; ++other) {
    const uint64_t hashed = Mix(key + (other + 1) * kGolden);
    rank += hashed < own || (hashed == own && other < position);
  }
  return rank;
}

// Positions in blocks of this many run the rounds lane by lane, round after round: one element's
// rounds are a chain of dependent multiplies, and independent lanes keep the multiplier busy.
constexpr int64_t kBlock = 256;

// The same map as Feistel + cycle walking element by element, for elements that share one size
// (above the rank sizes) and one key: each block takes one pass of the network, and the lanes
// still outside [0, limit) are packed together for the next pass until none is left.
void PermuteBlock(const int64_t* positions, int64_t count, uint64_t limit, uint64_t key, int bits,
                  int rounds, int64_t* permuted) {
  const int low_bits = bits / 2;
  const uint64_t low_mask = (uint64_t{1} << low_bits) - 1;
  const uint64_t high_mask = (uint64_t{1} << (bits - low_bits)) - 1;
  uint64_t high[kBlock];
  uint64_t low[kBlock];
  int64_t slot[kBlock];
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t value = static_cast<uint64_t>(positions[j]);
    high[j] = value >> low_bits;
    low[j] = value & low_mask;
    slot[j] = j;
  }
  while (count > 0) {
    for (int round = 0; round < rounds; ++round) {
      const uint64_t round_key = key + static_cast<uint64_t>(round + 1) * kGolden;
      if (round % 2 == 0) {
        for (int64_t j = 0; j < count; ++j) high[j] ^= Mix(low[j] ^ round_key) & high_mask;
      } else {
        for (int64_t j = 0; j < count; ++j) low[j] ^= Mix(high[j] ^ round_key) & low_mask;
      }
    }
    int64_t pending = 0;
    for (int64_t j = 0; j < count; ++j) {
      const uint64_t value = (high[j] << low_bits) | low[j];
      if (value < limit) {
        permuted[slot[j]] = static_cast<int64_t>(value);
      } else {
        high[pending] = high[j];
        low[pending] = low[j];
        slot[pending] = slot[j];
        ++pending;
      }
    }
    count = pending;
  }
}

class PermutePositionsOp : public OpKernel {
 public:
  explicit PermutePositionsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rounds", &rounds_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("small_rounds", &small_rounds_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("small_bits", &small_bits_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rank_max_size", &rank_max_size_));
    OP_REQUIRES(ctx, rounds_ >= 1 && small_rounds_ >= 1,
                errors::InvalidArgument("rounds and small_rounds must be >= 1"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& positions = ctx->input(0);
    const Tensor& sizes = ctx->input(1);
    const Tensor& tweaks = ctx->input(2);
    const Tensor& seed = ctx->input(3);
    OP_REQUIRES(ctx, positions.dims() == 1,
                errors::InvalidArgument("positions must be a vector, got shape ",
                                        positions.shape().DebugString()));
    for (const Tensor* t : {&sizes, &tweaks}) {
      OP_REQUIRES(ctx, t->dims() == 0 || t->shape() == positions.shape(),
                  errors::InvalidArgument("sizes and tweaks must be scalars or have the shape "
                                          "of positions"));
    }
    OP_REQUIRES(ctx, seed.dims() == 1 && seed.dim_size(0) == 2,
                errors::InvalidArgument("seed must have shape [2]"));
    const auto position = positions.flat<int64_t>();
    const auto size_values = sizes.flat<int64_t>();
    const auto tweak_values = tweaks.flat<int64_t>();
    const bool one_size = sizes.dims() == 0;
    const bool one_tweak = tweaks.dims() == 0;
    auto size = [&](int64_t i) { return size_values(one_size ? 0 : i); };
    const int64_t n = position.size();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, size(i) >= 1 && position(i) >= 0 && position(i) < size(i),
                  errors::InvalidArgument("position ", position(i), " at ", i,
                                          " is outside [0, ", size(i), ")"));
    }
    const uint64_t base = SeedBase(seed);
    auto key = [&](int64_t i) { return ElementKey(base, tweak_values(one_tweak ? 0 : i)); };
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, positions.shape(), &output));
    auto permuted = output->flat<int64_t>();
    const uint64_t shared_limit = one_size ? static_cast<uint64_t>(size_values(0)) : 0;
    if (one_size && one_tweak && shared_limit > static_cast<uint64_t>(rank_max_size_)) {
      // One permutation (an epoch's order): the key, width and rounds are the same for all.
      const uint64_t shared_key = key(0);
      const int bits = BitWidth(shared_limit - 1);
      const int rounds = bits <= small_bits_ ? small_rounds_ : rounds_;
      const int64_t* first = position.data();
      int64_t* out = permuted.data();
      auto blocks = [&](int64_t begin_block, int64_t end_block) {
        for (int64_t b = begin_block; b < end_block; ++b) {
          const int64_t begin = b * kBlock;
          const int64_t count = std::min(kBlock, n - begin);
          PermuteBlock(first + begin, count, shared_limit, shared_key, bits, rounds, out + begin);
        }
      };
      auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
      tensorflow::Shard(threads->num_threads, threads->workers, (n + kBlock - 1) / kBlock,
                        kBlock * 8 * rounds_, blocks);
      return;
    }
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t limit = static_cast<uint64_t>(size(i));
        const uint64_t element_key = key(i);
        const int bits = BitWidth(limit - 1);
        // Parts a few bits wide mix slowly: small permutations take more rounds.
        const int rounds = bits <= small_bits_ ? small_rounds_ : rounds_;
        uint64_t value = static_cast<uint64_t>(position(i));
        if (limit <= static_cast<uint64_t>(rank_max_size_)) {
          permuted(i) = static_cast<int64_t>(RankOfHash(value, limit, element_key));
          continue;
        }
        do {
          value = Feistel(value, element_key, bits, rounds);
        } while (value >= limit);
        permuted(i) = static_cast<int64_t>(value);
      }
    };
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    // About 10 ns a round and two passes on average per element.
    tensorflow::Shard(threads->num_threads, threads->workers, n, 20 * rounds_, work);
  }

 private:
  int rounds_;
  int small_rounds_;
  int small_bits_;
  int rank_max_size_;
};

// GatherPermuted: PermutePositions of one size and key (the epoch's order), and `table` at the
// permuted positions, in one pass: the random loads of a block are issued together, where a
// separate gather reads the order back from memory and loads one element at a time.
class GatherPermutedOp : public OpKernel {
 public:
  explicit GatherPermutedOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rounds", &rounds_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("small_rounds", &small_rounds_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("small_bits", &small_bits_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rank_max_size", &rank_max_size_));
    OP_REQUIRES(ctx, rounds_ >= 1 && small_rounds_ >= 1,
                errors::InvalidArgument("rounds and small_rounds must be >= 1"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& table = ctx->input(0);
    const Tensor& positions = ctx->input(1);
    const Tensor& size_tensor = ctx->input(2);
    const Tensor& seed = ctx->input(3);
    OP_REQUIRES(ctx, table.dims() == 1 && positions.dims() == 1 && size_tensor.dims() == 0,
                errors::InvalidArgument("table and positions must be vectors, size a scalar"));
    OP_REQUIRES(ctx, seed.dims() == 1 && seed.dim_size(0) == 2,
                errors::InvalidArgument("seed must have shape [2]"));
    const int64_t size = size_tensor.scalar<int64_t>()();
    OP_REQUIRES(ctx, size > rank_max_size_ && size <= table.dim_size(0),
                errors::InvalidArgument("size must be in (", rank_max_size_, ", ",
                                        table.dim_size(0), "] (the table's length), got ", size));
    const auto position = positions.flat<int64_t>();
    const int64_t n = position.size();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, position(i) >= 0 && position(i) < size,
                  errors::InvalidArgument("position ", position(i), " at ", i,
                                          " is outside [0, ", size, ")"));
    }
    // As PermutePositions with a tweak of 0.
    const uint64_t key = ElementKey(SeedBase(seed), 0);
    const int bits = BitWidth(static_cast<uint64_t>(size) - 1);
    const int rounds = bits <= small_bits_ ? small_rounds_ : rounds_;
    Tensor* permuted_tensor = nullptr;
    Tensor* gathered_tensor = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, positions.shape(), &permuted_tensor));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, positions.shape(), &gathered_tensor));
    const int64_t* first = position.data();
    const int64_t* values = table.flat<int64_t>().data();
    int64_t* permuted = permuted_tensor->flat<int64_t>().data();
    int64_t* gathered = gathered_tensor->flat<int64_t>().data();
    auto blocks = [&](int64_t begin_block, int64_t end_block) {
      for (int64_t b = begin_block; b < end_block; ++b) {
        const int64_t begin = b * kBlock;
        const int64_t count = std::min(kBlock, n - begin);
        PermuteBlock(first + begin, count, static_cast<uint64_t>(size), key, bits, rounds,
                     permuted + begin);
        for (int64_t j = begin; j < begin + count; ++j) gathered[j] = values[permuted[j]];
      }
    };
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, (n + kBlock - 1) / kBlock,
                      kBlock * 10 * rounds_, blocks);
  }

 private:
  int rounds_;
  int small_rounds_;
  int small_bits_;
  int rank_max_size_;
};

// ElementKeys: index_shuffle._element_key's uint64 of each key under one stateless seed, the keyed
// draws of `keyed_uniform`, `keyed_offsets` and `keyed_seeds` (crop offsets, masks, batch seeds):
// one node of a plan's graph where the TensorFlow-ops form is about 40, each of which tf.data
// traces and optimizes again for every dataset and epoch.
class ElementKeysOp : public OpKernel {
 public:
  explicit ElementKeysOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& keys = ctx->input(0);
    const Tensor& seed = ctx->input(1);
    OP_REQUIRES(ctx, seed.dims() == 1 && seed.dim_size(0) == 2,
                errors::InvalidArgument("seed must have shape [2]"));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, keys.shape(), &output));
    const auto key = keys.flat<int64_t>();
    auto hashed = output->flat<uint64_t>();
    const uint64_t base = SeedBase(seed);
    for (int64_t i = 0; i < key.size(); ++i) hashed(i) = ElementKey(base, key(i));
  }
};

}  // namespace

REGISTER_OP("ElementKeys")
    .Input("keys: int64")
    .Input("seed: int64")
    .Output("hashed: uint64")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_KERNEL_BUILDER(Name("ElementKeys").Device(DEVICE_CPU), ElementKeysOp);

REGISTER_OP("PermutePositions")
    .Input("positions: int64")
    .Input("sizes: int64")
    .Input("tweaks: int64")
    .Input("seed: int64")
    .Output("permuted: int64")
    .Attr("rounds: int")
    .Attr("small_rounds: int")
    .Attr("small_bits: int")
    .Attr("rank_max_size: int")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_KERNEL_BUILDER(Name("PermutePositions").Device(DEVICE_CPU), PermutePositionsOp);

REGISTER_OP("GatherPermuted")
    .Input("table: int64")
    .Input("positions: int64")
    .Input("size: int64")
    .Input("seed: int64")
    .Output("permuted: int64")
    .Output("gathered: int64")
    .Attr("rounds: int")
    .Attr("small_rounds: int")
    .Attr("small_bits: int")
    .Attr("rank_max_size: int")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(1));
      return ::tensorflow::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("GatherPermuted").Device(DEVICE_CPU), GatherPermutedOp);

}  // namespace tfx_dynamic_inputs
