#include "tile_tuning.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>

#include "bounded_table.h"

namespace torch_layouts {

struct TileTuning {
  std::mutex mutex;
  std::vector<TileShape> shapes;
  std::vector<double> best;
  std::vector<int> schedule;  // trial order: every shape, then the finalists; ~i: shape i untimed
  size_t issued = 0, reported = 0, timed = 0;
  int chosen = -1;
};

namespace {

// Tile shapes beside the rules' (units along a x along b): each was the fastest of a 7 x 5 grid
// (a: 16..1024, b: 16..256) for some family's 1 or 32 MiB H2D, D2H or D2D on this project's
// 2-thread VM (benchmarks/RESULTS.md), where the rules' shape was 1.1-2x slower.
constexpr TileShape kTileCandidates[] = {{1024, 16}, {256, 16},   {32, 16},  {512, 32}, {64, 32},  {32, 64},
                                         {256, 64},  {128, 128}, {1024, 128}, {32, 256}, {64, 256}, {512, 256}};
// Extended tiles: chunks of 4, 16 or 64 KiB, rows written plainly or streamed (streaming saved a
// fifth to a third of float32 MACE CONV2D_FILTER and OIhw16i16o copies at 32 MiB and cost float16
// ones a third: benchmarks/RESULTS.md).
constexpr TileShape kExtendedCandidates[] = {{4096, 0}, {4096, 1}, {16384, 0}, {16384, 1}, {65536, 0}, {65536, 1}};
// A tiled copy that streams also tries two shapes with plain stores: the rules' for plain stores
// and its own rules' shape. (Every candidate plain as well: more trials, and more noisy wins.)
constexpr int64_t kMostCandidates = std::max(std::size(kTileCandidates) + 2, std::size(kExtendedCandidates));
// After one trial of every shape, the fastest few and the rules' shape run twice more (a trial can
// catch a slow moment of a shared machine); the best time of each decides, and the rules' shape
// keeps its place unless another beats it by kMargin (a noisy win must not cost a regression).
constexpr int64_t kFinalists = 3;
constexpr int64_t kFinalRounds = 2;
constexpr double kMargin = 1.1;
constexpr size_t kMaxTunings = 256;

std::atomic<bool> g_on{[] {
  const char* env = std::getenv("TORCH_LAYOUTS_TILE_TUNING");
  return !(env && std::strcmp(env, "0") == 0);
}()};
std::atomic<int64_t> g_forced[2][3] = {};  // per kind: a, b, plain
BoundedTable<std::shared_ptr<TileTuning>> g_tunings(kMaxTunings);

// Each of `shapes` runs twice in a row and only the second run is timed: a shape's first call
// after another shape's finds the bytes in the other thread's cache where the shapes split the
// work differently, which a settled copy never pays (timed on their first calls, the shapes of
// the H2D of NHWC float32 at 1 MiB, 2 threads, took 31-60 us against 21-25 in a loop, and the
// copy settled on a shape about 1.3x slower than the best).
void schedule_trials(TileTuning& t, const std::vector<int>& shapes) {
  for (int i : shapes) t.schedule.insert(t.schedule.end(), {~i, i});
  t.timed += shapes.size();
}

std::shared_ptr<TileTuning> make_tuning(TileKind kind, TileShape rules, TileShape limit, const TileShape* plain_rules) {
  auto t = std::make_shared<TileTuning>();
  t->shapes.push_back(rules);
  auto add = [&](const TileShape& c, bool plain) {
    const TileShape s{std::min(limit.a, c.a), std::min(limit.b, c.b), plain};
    const bool seen = std::any_of(t->shapes.begin(), t->shapes.end(), [&](const TileShape& o) {
      return o.a == s.a && o.b == s.b && o.plain == s.plain;
    });
    if (!seen) t->shapes.push_back(s);
  };
  const bool tiles = kind == TileKind::kTiles;
  const std::span<const TileShape> others =
      tiles ? std::span<const TileShape>(kTileCandidates) : std::span<const TileShape>(kExtendedCandidates);
  for (const TileShape& c : others) add(c, false);
  if (tiles && plain_rules) {
    add(*plain_rules, true);
    add(rules, true);
  }
  t->best.assign(t->shapes.size(), std::numeric_limits<double>::infinity());
  std::vector<int> all(t->shapes.size());
  std::iota(all.begin(), all.end(), 0);
  schedule_trials(*t, all);
  if (t->shapes.size() == 1) t->chosen = 0;
  return t;
}

int fastest(const TileTuning& t) {
  const int best = static_cast<int>(std::min_element(t.best.begin(), t.best.end()) - t.best.begin());
  return t.best[0] <= t.best[best] * kMargin ? 0 : best;
}

}  // namespace

TileTrial next_tile(const std::vector<int64_t>* key, TileKind kind, TileShape rules, TileShape limit,
                    const TileShape* plain_rules) {
  const std::atomic<int64_t>* forced = g_forced[static_cast<int>(kind)];
  if (const int64_t a = forced[0].load(std::memory_order_relaxed); a > 0) {
    return {{std::min(limit.a, a), std::min(limit.b, forced[1].load(std::memory_order_relaxed)),
             forced[2].load(std::memory_order_relaxed) != 0}};
  }
  if (!key || !g_on.load(std::memory_order_relaxed)) return {rules};
  std::shared_ptr<TileTuning> t = g_tunings.find(*key).value_or(nullptr);
  if (!t) {
    // The first call of a geometry runs the rules' shape untimed: a copy made once pays nothing.
    g_tunings.keep(*key, make_tuning(kind, rules, limit, plain_rules));
    return {rules};
  }
  std::lock_guard<std::mutex> lock(t->mutex);
  if (t->chosen >= 0) return {t->shapes[t->chosen]};
  if (t->issued < t->schedule.size()) {
    const int i = t->schedule[t->issued++];
    if (i < 0) return {t->shapes[~i]};
    return {t->shapes[i], i, t};
  }
  return {t->shapes[fastest(*t)]};  // trials still running on other threads
}

void report_tile(const TileTrial& trial, double seconds) {
  TileTuning* t = trial.tuning.get();
  if (!t || trial.trial < 0) return;
  std::lock_guard<std::mutex> lock(t->mutex);
  if (t->chosen >= 0 || trial.trial >= static_cast<int>(t->shapes.size())) return;
  t->best[trial.trial] = std::min(t->best[trial.trial], seconds);
  ++t->reported;
  if (t->reported == t->shapes.size()) {
    std::vector<int> order(t->shapes.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return t->best[x] < t->best[y]; });
    order.resize(std::min<size_t>(order.size(), kFinalists));
    if (std::find(order.begin(), order.end(), 0) == order.end()) order.push_back(0);
    for (int64_t round = 0; round < kFinalRounds; ++round) schedule_trials(*t, order);
  }
  if (t->reported == t->timed) t->chosen = fastest(*t);
}

bool set_tile_tuning(bool on) { return g_on.exchange(on); }

void force_tile_shape(TileKind kind, int64_t a, int64_t b, bool plain) {
  std::atomic<int64_t>* forced = g_forced[static_cast<int>(kind)];
  forced[2] = plain;
  forced[1] = std::max<int64_t>(b, 0);
  forced[0] = std::max<int64_t>(a, 0);
}

int64_t tile_trial_calls() { return 1 + 2 * (kMostCandidates + 1 + kFinalRounds * (kFinalists + 1)); }

std::vector<TuningState> tile_tunings() {
  std::vector<TuningState> out;
  g_tunings.for_each([&](const std::shared_ptr<TileTuning>& t) {
    std::lock_guard<std::mutex> lock(t->mutex);
    out.push_back({t->shapes, t->best, t->chosen});
  });
  return out;
}

void forget_tile_tunings() { g_tunings.clear(); }

}  // namespace torch_layouts
