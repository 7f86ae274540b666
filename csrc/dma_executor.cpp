#include "dma_executor.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "dma_tiles.h"
#include "run_stretches.h"
#include "tile_tuning.h"
#include "value_fill.h"

namespace torch_layouts {
namespace {

// [low, high] element offsets a nest touches (inclusive); throws on overflow.
std::pair<int64_t, int64_t> span(const std::vector<int64_t>& ranges, const std::vector<int64_t>& strides,
                                 int64_t offset) {
  int64_t low = offset, high = offset;
  for (const auto k : c10::irange(ranges.size())) {
    TORCH_CHECK_VALUE(ranges[k] >= 0, "DMA nest has a negative loop range ", ranges[k]);
    int64_t reach = 0;
    TORCH_CHECK_VALUE(ranges[k] == 0 || !__builtin_mul_overflow(ranges[k] - 1, strides[k], &reach),
                      "DMA nest loop of range ", ranges[k], " and stride ", strides[k], " overflows");
    TORCH_CHECK_VALUE(!__builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high),
                      "DMA nest addresses overflow");
  }
  return {low, high};
}

void check_nest(const std::vector<int64_t>& ranges, const std::vector<int64_t>& strides, int64_t offset,
                int64_t numel, const char* what) {
  TORCH_CHECK_VALUE(strides.size() == ranges.size(), "DMA nest has ", ranges.size(), " loop ranges but ",
                    strides.size(), " ", what, " strides");
  bool empty = false;
  for (auto r : ranges) empty |= r == 0;
  if (empty) return;
  auto [low, high] = span(ranges, strides, offset);
  TORCH_CHECK_INDEX(low >= 0 && high < numel, "DMA nest ", what, " touches elements [", low, ", ", high,
                    "] outside its buffer of ", numel, " elements");
}

struct Loop {
  int64_t size, dst, src;  // strides in elements, then in bytes
};

// Loops in destination order (writes run sequentially), merged where both sides run on.
std::vector<Loop> destination_order(const Transfer& nest) {
  std::vector<Loop> loops;
  for (size_t k = 0; k < nest.ranges.size(); ++k) {
    if (nest.ranges[k] != 1) loops.push_back({nest.ranges[k], nest.dst_strides[k], nest.src_strides[k]});
  }
  std::stable_sort(loops.begin(), loops.end(),
                   [](const Loop& a, const Loop& b) { return std::abs(a.dst) > std::abs(b.dst); });
  std::vector<Loop> merged;
  for (const Loop& loop : loops) {
    if (!merged.empty() && merged.back().dst == loop.dst * loop.size && merged.back().src == loop.src * loop.size) {
      merged.back() = {merged.back().size * loop.size, loop.dst, loop.src};
    } else {
      merged.push_back(loop);
    }
  }
  return merged;
}

// A nest as copy_tile's problem: units of `unit` contiguous bytes on both sides; loop `a` runs
// along the destination (dst stride == unit), loop `b` along the source (src stride == unit);
// either may be absent (size 1). The other loops (byte strides, destination order) repeat the tile.
// Units of whole lines whose destination runs are not adjacent take the destination's innermost
// other loop as `a` (dst stride > unit: copy_spaced_runs).
struct TilePlan {
  int64_t unit;
  Loop a{1, 0, 0}, b{1, 0, 0};
  Loop c{1, 0, 0};  // for tiles of few units: the innermost outer loop, run unit by unit per tile position
  Loop e{1, 0, 0};  // a loop that continues the rows of both sides (copy_extended_tile)
  std::vector<Loop> outer;
};

// Bytes of one work step of copy_extended_tiles (chunks of loop e).
constexpr int64_t kExtendedBytes = 16384;

TilePlan tile_plan(const Transfer& nest, int64_t esize) {
  std::vector<Loop> loops = destination_order(nest);
  for (Loop& loop : loops) loop = {loop.size, loop.dst * esize, loop.src * esize};
  TilePlan plan{esize};
  if (!loops.empty() && loops.back().dst == esize && loops.back().src == esize) {
    plan.unit = loops.back().size * esize;
    loops.pop_back();
  }
  if (!loops.empty() && loops.back().dst == plan.unit) {
    plan.a = loops.back();
    loops.pop_back();
  }
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
    if (it->src == plan.unit) {
      plan.b = *it;
      loops.erase(std::next(it).base());
      break;
    }
  }
  // A loop that continues the destination's rows (a) and the source's rows (b) both: the nest
  // is a transpose of rows a x (e, b) into rows b x (e, a) (MACE CONV2D_FILTER, OIhw16i16o).
  const int64_t row_a = plan.a.size * plan.unit, row_b = plan.b.size * plan.unit;
  if (plan.a.size > 1 && plan.b.size > 1 && plan.a.size * row_b <= kExtendedBytes) {
    for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
      if (it->size > 1 && it->dst == row_a && it->src == row_b) {
        plan.e = *it;
        loops.erase(std::next(it).base());
        plan.outer = std::move(loops);
        return plan;
      }
    }
  }
  if (plan.a.size == 1 && plan.b.size > 1 && plan.unit % 64 == 0 && !loops.empty() && loops.back().dst > plan.unit &&
      loops.back().size * plan.b.size >= 64) {
    plan.a = loops.back();
    loops.pop_back();
  }
  // A tile too small to pay for itself, unless its units are whole lines (docs/design.md, "How
  // the executor runs a nest").
  if (plan.a.size * plan.b.size < 64 && plan.unit < 64 && !loops.empty()) {
    plan.c = loops.back();
    loops.pop_back();
  }
  plan.outer = std::move(loops);
  return plan;
}

// Bytes from which a copy writes around the cache (non-temporal stores): copies this large
// do not stay in cache anyway, and skipping the read-for-ownership of every destination line
// saves a third of the memory traffic. 8 MiB by default (a VM's reported cache sizes are
// unreliable); TORCH_LAYOUTS_STREAM_BYTES or set_stream_bytes() changes it.
std::atomic<int64_t> g_stream_bytes{[] {
  const char* env = std::getenv("TORCH_LAYOUTS_STREAM_BYTES");
  return env ? static_cast<int64_t>(std::atoll(env)) : static_cast<int64_t>(8) << 20;
}()};

// Asks for the source lines of the next tile: rows far apart defeat the hardware prefetcher.
// Not for units of whole lines (Spyre's sticks, HTP's croutons): a unit's lines are read together,
// and a prefetch per line cost more than it saved (Spyre default float16 at 1 MiB, tuned, in one
// process: H2D 1.56 -> 1.28x memcpy, D2H 1.54 -> 1.40, D2D 1.58 -> 1.35; D2H at 32 MiB 0.83 -> 0.71;
// HTP's as fast).
inline void prefetch_rows(const char* s, int64_t rows, int64_t stride, int64_t bytes, int64_t unit) {
  if (unit >= 64 || rows < 4 || rows > 64 || bytes <= 0 || stride < 1024) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(s + r * stride + off);
}

// Asks for the next tile's source, one block of `bytes`, where each tile reads one such block and
// the next lies elsewhere: a restickify between two Spyre layouts reads 4 KiB blocks 512 KiB apart,
// a page each, where the prefetchers stop (32 MiB float32 default -> dim_order [1, 0], 2 threads,
// alternated processes: 2.8 -> 1.2-1.3x memcpy; float16 2.0-2.2 -> 1.3-1.9; one tile ahead as good
// as two, four worse).
constexpr int64_t kAheadBytes = 16384;
inline void prefetch_block(const char* s, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(s + off);
}

// Positions of the plan's outer loops.
int64_t outer_count(const TilePlan& plan) {
  int64_t outer = 1;
  for (const Loop& loop : plan.outer) outer *= loop.size;
  return outer;
}

// Byte offsets of outer position i (row-major over plan.outer) on the destination and the source.
std::pair<int64_t, int64_t> outer_offsets(const TilePlan& plan, int64_t i) {
  int64_t doff = 0, soff = 0;
  for (size_t k = plan.outer.size(); k-- > 0;) {
    doff += (i % plan.outer[k].size) * plan.outer[k].dst;
    soff += (i % plan.outer[k].size) * plan.outer[k].src;
    i /= plan.outer[k].size;
  }
  return {doff, soff};
}

// Nests whose tile is a few units (e.g. 4 x 9): per outer position, every tile position runs
// along loop c with constant strides, as PyTorch's TensorIterator would. Where the tile is one
// strided run along a (no source loop of units) longer than c, each position of c runs along a
// instead (a clone of x[:, ::2] in Spyre's layout: 16-unit runs, c of 2: 235 -> 71-77 us).
void copy_small_tiles(char* d0, const char* s0, const TilePlan& plan) {
  const int64_t unit = plan.unit;
  const bool along_a = plan.b.size == 1 && plan.a.size > plan.c.size;
  for_items(outer_count(plan), plan.a.size * plan.b.size * plan.c.size * unit, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto [doff, soff] = outer_offsets(plan, i);
      if (along_a) {
        for (int64_t c = 0; c < plan.c.size; ++c)
          copy_strided(d0 + doff + c * plan.c.dst, s0 + soff + c * plan.c.src, plan.a.size, plan.a.dst, plan.a.src, unit);
        continue;
      }
      for (int64_t a = 0; a < plan.a.size; ++a)
        for (int64_t b = 0; b < plan.b.size; ++b)
          copy_strided(d0 + doff + a * unit + b * plan.b.dst, s0 + soff + a * plan.a.src + b * unit, plan.c.size,
                       plan.c.dst, plan.c.src, unit);
    }
  });
}

// Nests with a loop e that continues both sides' rows: work items are an outer position and a
// chunk of e of about chunking.a bytes (the rules: kExtendedBytes), each one copy_extended_tile,
// its destination rows streamed where chunking.b is 1 (the rules: never; tuning may choose it).
void copy_extended_tiles(char* d0, const char* s0, const TilePlan& plan, TileShape chunking) {
  const int64_t step = plan.a.size * plan.b.size * plan.unit;
  const int64_t ke = std::clamp<int64_t>(chunking.a / step, 1, plan.e.size);
  const int64_t chunks = (plan.e.size + ke - 1) / ke;
  const bool stream = chunking.b != 0;
  for_items(outer_count(plan) * chunks, ke * step, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto [doff, soff] = outer_offsets(plan, i / chunks);
      const int64_t e0 = (i % chunks) * ke;
      copy_extended_tile(d0 + doff + e0 * plan.e.dst, s0 + soff + e0 * plan.e.src, plan.a.size, plan.b.size,
                         std::min(ke, plan.e.size - e0), plan.a.src, plan.b.dst, plan.unit, stream);
    }
    if (stream) end_streaming();
  });
}

// The rules' tile shape. Tiles of 2 KiB (t x t units, one line a row for 2-byte units): rows of a
// side whose rows lie far apart alias in cache at power-of-two strides, so that side gets few rows.
// Where only the destination's rows lie far apart, its runs grow 4x longer (longer streamed rows);
// where neither side's do, the tile grows 4x. A source of short adjacent rows is read whole rows at
// a time; when streaming, so is one of whole-line units up to 8 KiB (Spyre's sticks: a source row
// read in order, each 128-byte stick streamed to its column; 10-40% faster at 32 MiB, slower in
// cache). Thin tiles grow long. Square transposes (both sides 64 units or more) of 2/4/8-byte units
// (NHWC, dim_order changes) and of 16-byte units (MACE's float32 images; not when streamed from
// source rows farther apart than the destination's, where they measured slower) take 16 KiB tiles,
// 64 destination rows of 256 bytes: per tile, the block transposes amortise the call and the
// prefetch, and 64 far-apart rows stay within what the prefetchers and the L1 hold (1.2-2x faster
// than 2 KiB tiles at 1 and 32 MiB, benchmarks/RESULTS.md). Where the source's rows lie farther
// apart than the destination's (NCHW -> NHWC, kHWC8), the tile is turned the other way: 64 source
// rows of 256 bytes, 128 units when streaming (each far row read in longer runs; 1.5-2x faster at
// 32 MiB). Below the streaming size, far-apart destination rows of 2/4/8-byte units are written in
// 1 KiB runs, 32 rows a tile (NHWC -> NCHW, kHWC8's D2H: 1.4x faster at 1 and 4 MiB); and a side
// with few rows (64 or fewer) far apart facing near rows on the other (the H2D and D2H of blocked-
// channel formats: kCHW32, nChw16c, a dim_order change of float32) takes all of those rows and
// moves each in 1 KiB runs (1.3-1.7x faster at 1 and 4 MiB; streamed, the H2D of 8 to 64 source
// rows too: kCDHW32 and kCHW32 1.1-1.4x faster at 32 MiB, the others as fast or faster with shorter
// tiles). A copy that repeats tries other shapes too (tile_tuning.h).
TileShape rule_tile(const TilePlan& plan, bool stream) {
  const int64_t unit = plan.unit, na = plan.a.size, nb = plan.b.size;
  int64_t t = 8;  // a power of two, at least 8, with t * t * unit <= 2 KiB
  while (t * t * 4 * unit <= 2048) t *= 2;
  const bool far_src = std::abs(plan.a.src) >= 1024, far_dst = std::abs(plan.b.dst) >= 1024;
  const int64_t dense_rows = stream && unit % 64 == 0 ? 8192 : 1024;  // bytes of a source row read whole
  const bool dense_src = plan.a.src == nb * unit && nb * unit <= dense_rows;  // whole source rows, adjacent
  const bool wide_ok = unit == 16 && !(stream && std::abs(plan.a.src) > std::abs(plan.b.dst));
  const bool square = (unit == 2 || unit == 4 || unit == 8 || wide_ok) && na >= 64 && nb >= 64;
  const int64_t ta0 = std::min(na, far_dst && !far_src ? 4 * t : t), tb0 = dense_src ? nb : std::min(nb, t);
  const int64_t area = t * t * (far_src ? 1 : 4);
  const bool rows_far = std::abs(plan.a.src) > std::abs(plan.b.dst);  // the source's rows the farther apart
  const bool block_units = unit == 2 || unit == 4 || unit == 8;
  const bool few_src = (!stream || na >= 8) && block_units && far_src && !far_dst && na <= 64 && nb >= 64;
  const bool few_dst = !stream && block_units && far_dst && !far_src && nb <= 64 && na >= 64;
  int64_t tb = std::min(nb, std::max(tb0, area / ta0)), ta = std::min(na, std::max(ta0, area / tb));
  if (square && rows_far) {  // 64 far source rows, each in 256-byte runs (128 units streamed)
    ta = std::min<int64_t>(na, 64);
    tb = std::min(nb, stream ? 128 : 256 / unit);
  } else if (square && far_dst && !stream && block_units) {  // 32 far destination rows in 1 KiB runs
    ta = std::min(na, 1024 / unit);
    tb = std::min<int64_t>(nb, 32);
  } else if (square) {  // 64 destination rows of 256 bytes
    ta = std::min(na, 256 / unit);
    tb = std::min<int64_t>(nb, 64);
  } else if (few_src) {
    ta = na;
    tb = std::max(tb, std::min(nb, 1024 / unit));
  } else if (few_dst) {
    tb = nb;
    ta = std::max(ta, std::min(na, 1024 / unit));
  }
  return {ta, tb};
}

// Every tile of tile.a x tile.b units of the plan; work items are rectangles of tiles of about
// kParallelBytes, split over the intra-op threads. Loop a runs along the destination and b along
// the source, so that a rectangle spanning b whole (items in order of a) is a run of the source's
// rows, and one spanning a whole (items in order of b) a run of the destination's: `split` says
// which side's runs the threads take (D2H, the destination's: at 1 MiB, 2 threads, NHWC float16
// 1.59-1.84 -> 1.28-1.38x memcpy, Spyre default float32 0.97 -> 0.84-0.93; H2D and D2D measured
// faster split by the source).
void run_tiles(char* d0, const char* s0, const TilePlan& plan, TileShape tile, bool stream, Split split) {
  const int64_t unit = plan.unit, na = plan.a.size, nb = plan.b.size, ta = tile.a, tb = tile.b;
  const int64_t nd = static_cast<int64_t>(plan.outer.size());
  const int64_t outer = outer_count(plan);
  const bool by_destination = split == Split::kDestination;
  const bool spaced = na > 1 && plan.a.dst != unit;
  auto extent = [&](int64_t n, int64_t t, int64_t across) {  // units along a loop of n, tiles of t
    return std::min(n, std::max<int64_t>(1, kParallelBytes / (t * across * unit)) * t);
  };
  const int64_t cb = by_destination ? extent(nb, tb, extent(na, ta, tb)) : extent(nb, tb, ta);
  const int64_t ca = by_destination ? extent(na, ta, tb) : extent(na, ta, cb);
  const int64_t blocks_a = (na + ca - 1) / ca, blocks_b = (nb + cb - 1) / cb, blocks = blocks_a * blocks_b;
  const int64_t items = outer * blocks;
  const int64_t item_bytes = ca * cb * unit;
  auto rectangle = [&](char* d, const char* s, int64_t a0, int64_t b0) {
    for (int64_t a = a0; a < std::min(na, a0 + ca); a += ta)
      for (int64_t b = b0; b < std::min(nb, b0 + cb); b += tb) {
        prefetch_rows(s + a * plan.a.src + (b + tb) * unit, std::min(ta, na - a), plan.a.src,
                      b + tb < nb ? std::min(tb, nb - b - tb) * unit : 0, unit);
        char* to = d + a * plan.a.dst + b * plan.b.dst;
        const char* from = s + a * plan.a.src + b * unit;
        if (spaced) {
          copy_spaced_runs(to, from, std::min(ta, na - a), std::min(tb, nb - b), plan.a.src, plan.a.dst, plan.b.dst,
                           unit, stream);
        } else {
          copy_tile(to, from, std::min(ta, na - a), std::min(tb, nb - b), plan.a.src, plan.b.dst, unit, stream);
        }
      }
  };

  auto body = [&](int64_t begin, int64_t end) {
    struct Fence {
      bool on;
      ~Fence() { if (on) end_streaming(); }
    } fence{stream};
    std::vector<int64_t> idx(nd);
    int64_t rem = begin / blocks, doff = 0, soff = 0;
    for (int64_t k = nd - 1; k >= 0; --k) {
      idx[k] = rem % plan.outer[k].size;
      rem /= plan.outer[k].size;
      doff += idx[k] * plan.outer[k].dst;
      soff += idx[k] * plan.outer[k].src;
    }
    int64_t blk = begin % blocks;
    // one tile a position, its source one block, the next position's elsewhere: prefetch_block
    const int64_t tile_bytes = na * nb * unit;
    const Loop* next = blocks == 1 && nd > 0 && plan.a.src == nb * unit && tile_bytes <= kAheadBytes &&
                               plan.outer[nd - 1].src != tile_bytes
                           ? &plan.outer[nd - 1]
                           : nullptr;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t ia = by_destination ? blk % blocks_a : blk / blocks_b;
      const int64_t ib = by_destination ? blk / blocks_a : blk % blocks_b;
      if (next != nullptr && i + 1 < end && idx[nd - 1] + 1 < next->size) prefetch_block(s0 + soff + next->src, tile_bytes);
      rectangle(d0 + doff, s0 + soff, ia * ca, ib * cb);
      if (++blk < blocks) continue;
      blk = 0;
      for (int64_t k = nd - 1; k >= 0; --k) {
        doff += plan.outer[k].dst;
        soff += plan.outer[k].src;
        if (++idx[k] < plan.outer[k].size) break;
        doff -= plan.outer[k].dst * plan.outer[k].size;
        soff -= plan.outer[k].src * plan.outer[k].size;
        idx[k] = 0;
      }
    }
  };
  for_items(items, item_bytes, body);
}

// Copies this large are tuned (tile_tuning.h): a smaller one costs too little for its shape to matter.
constexpr int64_t kTuneBytes = int64_t(1) << 19;

// A nest's geometry for tile tuning: its kind and plan, whether it streams, how its work splits,
// and the thread count.
std::vector<int64_t> tuning_key(const TilePlan& plan, TileKind kind, bool stream, Split split) {
  std::vector<int64_t> key{static_cast<int64_t>(kind), plan.unit, stream, static_cast<int64_t>(split),
                           at::get_num_threads()};
  for (const Loop& loop : {plan.a, plan.b, plan.e}) key.insert(key.end(), {loop.size, loop.dst, loop.src});
  for (const Loop& loop : plan.outer) key.insert(key.end(), {loop.size, loop.dst, loop.src});
  return key;
}

// run(shape) with the shape tuning gives this call of a nest of `bytes`; timed when it is a trial.
template <typename Run>
void run_tuned(const TilePlan& plan, TileKind kind, int64_t bytes, bool stream, Split split, TileShape rules,
               TileShape limit, const TileShape* plain_rules, const Run& run) {
  if (bytes < kTuneBytes) return run(next_tile(nullptr, kind, rules, limit).shape);
  const std::vector<int64_t> key = tuning_key(plan, kind, stream, split);
  const TileTrial trial = next_tile(&key, kind, rules, limit, plain_rules);
  const auto start = std::chrono::steady_clock::now();
  run(trial.shape);
  if (trial.trial >= 0) {
    report_tile(trial, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

void copy_nest(char* dst, const char* src, const Transfer& nest, int64_t esize, Split split) {
  const TilePlan plan = tile_plan(nest, esize);
  char* d0 = dst + nest.dst_offset * esize;
  const char* s0 = src + nest.src_offset * esize;
  const int64_t unit = plan.unit;
  const int64_t bytes = outer_count(plan) * plan.a.size * plan.b.size * plan.e.size * unit;
  const bool stream = bytes >= g_stream_bytes.load(std::memory_order_relaxed);  // past the caches
  if (plan.e.size > 1) {
    return run_tuned(plan, TileKind::kExtended, bytes, false, split, {kExtendedBytes, 0}, {kStageBytes, 1}, nullptr,
                     [&](TileShape chunking) { copy_extended_tiles(d0, s0, plan, chunking); });
  }
  if (plan.c.size > 1) return copy_small_tiles(d0, s0, plan);
  if (plan.outer.empty() && plan.a.size == 1 && plan.b.size == 1) {  // one run: split it across threads
    auto copy = [&](bool streamed) {
      at::parallel_for(0, unit, unit > 2 * kParallelBytes ? kParallelBytes : unit + 1, [&](int64_t begin, int64_t end) {
        copy_run(d0 + begin, s0 + begin, end - begin, streamed);
        if (streamed) end_streaming();
      });
    };
    if (!stream) return copy(false);
    // Tuned only whether it streams (a 32 MiB D2H of oneDNN's nchw: 1.24 -> 0.92x memcpy plain).
    const TileShape one{1, 1};
    return run_tuned(plan, TileKind::kTiles, bytes, stream, split, one, one, &one,
                     [&](TileShape t) { copy(!t.plain); });
  }
  const TileShape plain_rules = stream ? rule_tile(plan, false) : TileShape{};  // what tuning tries unstreamed
  run_tuned(plan, TileKind::kTiles, bytes, stream, split, rule_tile(plan, stream), {plan.a.size, plan.b.size},
            stream ? &plain_rules : nullptr,
            [&](TileShape tile) { run_tiles(d0, s0, plan, tile, stream && !tile.plain, split); });
}

}  // namespace

void check_nests(const std::vector<Transfer>& nests, int64_t dst_numel, int64_t src_numel) {
  for (const auto& nest : nests) {
    check_nest(nest.ranges, nest.dst_strides, nest.dst_offset, dst_numel, "destination");
    check_nest(nest.ranges, nest.src_strides, nest.src_offset, src_numel, "source");
  }
}

void run_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, const void* src, int64_t src_numel,
               int64_t element_size, Split split) {
  check_nests(nests, dst_numel, src_numel);
  for (const auto& nest : nests) {
    bool empty = false;
    for (auto r : nest.ranges) empty |= r == 0;
    if (!empty) copy_nest(static_cast<char*>(dst), static_cast<const char*>(src), nest, element_size, split);
  }
}

int64_t set_stream_bytes(int64_t bytes) {
  TORCH_CHECK_VALUE(bytes >= 0, "stream threshold must be >= 0 bytes, got ", bytes);
  return g_stream_bytes.exchange(bytes);
}

namespace {
// The elements of `nd` dims of ranges and strides from p set to v: the innermost dim a run (a
// plain fill where its elements are adjacent), the outer ones loops (no allocation: a padded
// tensor's fills run at every allocation).
template <typename E>
void fill_dims(E* p, const int64_t* ranges, const int64_t* strides, size_t nd, E v) {
  if (nd == 1) {
    if (strides[0] == 1) {
      std::fill_n(p, ranges[0], v);
    } else {
      for (int64_t i = 0; i < ranges[0]; ++i) p[i * strides[0]] = v;
    }
    return;
  }
  if (nd == 2 && strides[1] == 1) {  // rows of one run (each stick's padding): no call per row
    for (int64_t i = 0; i < ranges[0]; ++i) std::fill_n(p + i * strides[0], ranges[1], v);
    return;
  }
  for (int64_t i = 0; i < ranges[0]; ++i) fill_dims(p + i * strides[0], ranges + 1, strides + 1, nd - 1, v);
}

template <typename E>
void fill_nest(E* base, const Fill& fill, E v) {
  const size_t nd = fill.ranges.size();
  for (auto r : fill.ranges) {
    if (r == 0) return;
  }
  if (nd == 0) {
    base[fill.offset] = v;
    return;
  }
  fill_dims(base + fill.offset, fill.ranges.data(), fill.strides.data(), nd, v);
}

// The pad value as one element of `dtype` (converted as fill_ would), its bytes first in E.
template <typename E>
E pad_bits(const c10::Scalar& value, c10::ScalarType dtype) {
  unsigned char bytes[sizeof(uint64_t)] = {};
  AT_DISPATCH_V2(dtype, "pad_bits", AT_WRAP([&] {
    const scalar_t v = value.to<scalar_t>();
    std::memcpy(bytes, &v, std::min(sizeof(scalar_t), sizeof(bytes)));
  }), AT_EXPAND(AT_ALL_TYPES), at::kHalf, at::kBFloat16, at::kBool, at::kFloat8_e5m2, at::kFloat8_e4m3fn,
      at::kFloat8_e5m2fnuz, at::kFloat8_e4m3fnuz);
  E bits;
  std::memcpy(&bits, bytes, sizeof(E));
  return bits;
}
}  // namespace

namespace {
// Every position the fills cover set to value; every one of the numel elements where fills is null.
// Written here, not by fill_ on as_strided views: no op dispatched (nor profiled) per box.
void set_positions(const std::vector<Fill>* fills, void* base, int64_t numel, c10::ScalarType dtype,
                   const c10::Scalar& value) {
  auto fill_all = [&](auto bits) {
    using E = decltype(bits);
    if (fills == nullptr) {
      fill_value(static_cast<E*>(base), numel, bits);  // memset for a pad of one repeated byte
    } else {
      for (const auto& fill : *fills) fill_nest<E>(static_cast<E*>(base), fill, bits);
    }
  };
  bool plain = false;  // a dtype pad_bits converts to
  switch (dtype) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong: case at::kFloat:
    case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kBool: case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fn: case at::kFloat8_e5m2fnuz: case at::kFloat8_e4m3fnuz:
      plain = true;
      break;
    default:
      break;
  }
  switch (plain ? c10::elementSize(dtype) : 0) {
    case 1: return fill_all(pad_bits<uint8_t>(value, dtype));
    case 2: return fill_all(pad_bits<uint16_t>(value, dtype));
    case 4: return fill_all(pad_bits<uint32_t>(value, dtype));
    case 8: return fill_all(pad_bits<uint64_t>(value, dtype));
    default: {  // other dtypes: fill_ converts
      const at::Tensor flat = at::from_blob(base, {numel}, at::TensorOptions().dtype(dtype));
      if (fills == nullptr) {
        flat.fill_(value);
        return;
      }
      for (const auto& fill : *fills) flat.as_strided(fill.ranges, fill.strides, fill.offset).fill_(value);
    }
  }
}
}  // namespace

void run_fills(const std::vector<Fill>& fills, void* base, int64_t numel, c10::ScalarType dtype,
               const c10::Scalar& value) {
  for (const auto& fill : fills) check_nest(fill.ranges, fill.strides, fill.offset, numel, "padding");
  if (!fills.empty()) set_positions(&fills, base, numel, dtype, value);
}

void fill_fresh(const std::vector<Fill>& fills, void* base, int64_t numel, c10::ScalarType dtype,
                const c10::Scalar& value) {
  int64_t covered = 0;
  for (const auto& fill : fills) covered += c10::multiply_integers(fill.ranges);
  if (2 * covered < numel) return run_fills(fills, base, numel, dtype, value);
  set_positions(nullptr, base, numel, dtype, value);
}

}  // namespace torch_layouts
