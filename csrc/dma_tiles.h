// The copy kernel every DMA nest reduces to: a 2-D tile of units (runs of bytes contiguous on
// both sides) that are contiguous along one loop in the destination and along another in the
// source. One kernel covers plain runs (one loop), gathers, scatters and transposes.
#pragma once

#include <cstdint>

namespace torch_layouts {

// d[a * unit + b * dst_b] = s[a * src_a + b * unit] for a < na, b < nb (byte offsets, unit bytes
// per element). Transposes of 1/2/4/8-byte units use SIMD block transposes; wider units are
// copied whole (in 32-byte words where AVX is). na == 1 or nb == 1 is a plain strided copy.
// `stream` writes the destination with non-temporal stores where alignment allows (copies larger
// than the cache); call end_streaming() before other threads read what was written.
void copy_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b, int64_t unit,
               bool stream);
void end_streaming();

// d[a * dst_a + b * dst_b] = s[a * src_a + b * unit] for a < na, b < nb: units of whole lines
// (unit a multiple of 64 bytes) whose destination runs are not adjacent (dst_a > unit: Spyre's
// sticks of one batch entry, x[1] of a 3-D tensor, 128-byte runs 512 bytes apart). Destination row
// b (its na runs dst_a apart) is written whole before the next, so that a tile never writes down a
// column of rows dst_b apart (16 or more such rows 16 KiB apart took 2-4x memcpy). `stream` as
// copy_tile.
void copy_spaced_runs(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_a, int64_t dst_b,
                      int64_t unit, bool stream);

// d[a * unit + b * dst_b + e * na * unit] = s[a * src_a + b * unit + e * nb * unit] for a < na,
// b < nb, e < ne: na source rows of ne * nb adjacent units become nb destination rows of
// ne * na adjacent units. One transpose into an L1 buffer, then each destination row gathered
// from the buffer (for rows of 4, 8 or 16 bytes a second block transpose, of row-wide units);
// where destination chunks (na units) are of an odd width under a line and source chunks (nb
// units) whole words, the other way round: the source chunks gathered first, then one transpose
// of nb-unit records. `stream` gathers or transposes the rows into a second buffer and writes
// each with non-temporal stores. Needs na * nb * ne * unit <= kStageBytes.
void copy_extended_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t ne, int64_t src_a, int64_t dst_b,
                        int64_t unit, bool stream);

// One contiguous run of bytes, streamed (non-temporal) when asked.
void copy_run(char* d, const char* s, int64_t bytes, bool stream);

// d[i * dst_step] = s[i * src_step] for i < n, units of `unit` bytes (byte steps).
void copy_strided(char* d, const char* s, int64_t n, int64_t dst_step, int64_t src_step, int64_t unit);

// Whether copy_tile may transpose 2/4/8-byte units in AVX-512 blocks of 64-byte rows (whole cache
// lines); the CPU must have AVX-512F and AVX-512BW. set_line_blocks(false) keeps the 256-bit blocks
// of half lines (tests compare both); returns the old setting; ValueError turning on without them.
bool line_blocks_available();
bool set_line_blocks(bool on);

// The largest tile (bytes) copy_tile stages through L1 when streaming.
constexpr int64_t kStageBytes = 65536;

}  // namespace torch_layouts
