// Tile shapes of the DMA executor's transposes, measured per copy geometry (docs/design.md,
// "Tile tuning"). The executor's rules pick a shape from a nest's geometry alone; which shape is
// fastest also depends on the machine (caches, prefetchers, write-combining, threads), by up to 2x.
// The first calls of a geometry that repeats are trials: each runs the whole copy with one
// candidate shape and is timed; after the trials every call runs the fastest. Every shape copies
// the same bytes: tuning changes speed only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace torch_layouts {

// How a nest's tiles run. Tiled nests: units along the destination's rows (a) x along the
// source's rows (b) per tile, and `plain`: written with plain stores though the copy is large
// enough to stream. Extended tiles (a loop continuing both sides' rows): the bytes of one chunk of
// that loop (a) and whether the destination rows stream (b = 1) or not (0).
struct TileShape {
  int64_t a, b;
  bool plain = false;
};
enum class TileKind { kTiles, kExtended };

// One geometry's trials and its chosen shape (tile_tuning.cpp).
struct TileTuning;

// The shape a call runs; `trial` >= 0: a trial of `tuning`, whose time report_tile wants.
struct TileTrial {
  TileShape shape;
  int trial = -1;
  std::shared_ptr<TileTuning> tuning;
};

// The shape for this call of a geometry (`key`: the nest's plan and the thread count; null for a
// copy too small to tune) whose rules pick `rules`, candidates clamped to `limit` (a tiled nest's
// na x nb units): the forced shape of its kind, else the rules' where tuning is off, else a trial
// or the fastest. A tiled copy large enough to stream (`plain_rules`: the rules' shape were it
// not) also tries that shape and its own rules' shape with plain stores: whether streaming pays
// depends on the machine's caches (a 32 MiB D2H on a host with a large L3 ran 1.2-1.6x faster
// plain, most H2D and D2D 1.3-2x faster streamed).
TileTrial next_tile(const std::vector<int64_t>* key, TileKind kind, TileShape rules, TileShape limit,
                    const TileShape* plain_rules = nullptr);
// Records a trial's time in the tuning that issued it (the table may have dropped it since).
void report_tile(const TileTrial& trial, double seconds);

// Whether geometries are tuned (default on; TORCH_LAYOUTS_TILE_TUNING=0 turns it off); returns the
// previous setting.
bool set_tile_tuning(bool on);
// Every call of that kind runs this shape (a > 0, b >= 0; clamped to its limit; `plain`: plain
// stores), untuned; a = 0 restores tuning. For tests.
void force_tile_shape(TileKind kind, int64_t a, int64_t b, bool plain = false);
// The most trial calls a geometry takes before it settles.
int64_t tile_trial_calls();

struct TuningState {
  std::vector<TileShape> shapes;  // the rules' shape first, then the other candidates
  std::vector<double> best;       // best seconds per shape so far (infinity: not tried)
  int chosen;                     // index into shapes once settled, else -1
};
std::vector<TuningState> tile_tunings();
void forget_tile_tunings();

}  // namespace torch_layouts
