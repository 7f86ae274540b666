// The row math of row_math.h written once over a vector type S. row_math.cpp includes this file
// once per instruction set, inside that set's namespace and after its S (and before nothing
// else), so each set compiles these functions with its own target: no includes here, and no
// templates that other files could instantiate too.
//
// S provides: V, kLanes, splat, zeros, ld(p, r, fill) (the first r lanes from p, the others
// `fill`), st(p, r, v) (the first r lanes), keep(v, r) (lanes from r on zeroed), add, sub, mul, div,
// max and min (the second operand where either is NaN), fmadd(a, b, c) = a * b + c,
// fnmadd(a, b, c) = c - a * b, hsum, hmax, floor, scale2n(p, n) = p * 2^n, keep_nan(x, e) (x where
// it is NaN, else e).

// body(i, r) over chunks of kLanes elements, the last one of r < kLanes.
template <typename Body>
inline void chunks(int64_t n, Body body) {
  int64_t i = 0;
  for (; i + S::kLanes <= n; i += S::kLanes) body(i, S::kLanes);
  if (i < n) body(i, n - i);
}

// f(k, j) for run j of every row k of the block, run by run, so that rows adjacent within a tile
// are visited in storage order. Accumulators live in registers within a run and in per-row
// arrays between runs.
template <typename F>
inline void each_run(RowShape s, int64_t count, F f) {
  for (int64_t j = 0; j < s.runs; ++j)
    for (int64_t k = 0; k < count; ++k) f(k, j);
}

inline float* ptr(Row x, int64_t k, int64_t j) { return x.base[k] + x.off[j]; }

// e^x (constants in row_math.cpp): measured within 1.3 ulp over its range; -inf gives 0, +inf
// inf, NaN NaN.
inline S::V exp_lanes(S::V x) {
  using V = S::V;
  const V c = S::min(S::max(x, S::splat(kExpLow)), S::splat(kExpHigh));
  const V fx = S::floor(S::fmadd(c, S::splat(kLog2e), S::splat(0.5f)));
  V r = S::fnmadd(fx, S::splat(kLn2High), c);
  r = S::fnmadd(fx, S::splat(kLn2Low), r);
  V p = S::splat(kExpPoly[0]);
  for (int k = 1; k < 6; ++k) p = S::fmadd(p, r, S::splat(kExpPoly[k]));
  p = S::fmadd(p, S::mul(r, r), S::add(r, S::splat(1.0f)));
  return S::keep_nan(x, S::scale2n(p, fx));
}

template <int64_t R>
void softmax_runs(RowShape s, int64_t count, Row x, Row out, bool log, bool safe) {
  if (R) s.run = s.last = R;
  using V = S::V;
  V acc[kMaxBlockRows];
  float m[kMaxBlockRows];
  bool zero[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) acc[k] = S::splat(-kInf);
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x, k, j);
    V a = acc[k];
    chunks(run_length(s, j), [&](int64_t i, int64_t r) { a = S::max(a, S::ld(xp + i, r, -kInf)); });
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) {
    m[k] = S::hmax(acc[k]);
    zero[k] = safe && m[k] == -kInf;
    acc[k] = S::zeros();
  }
  if (log) {
    each_run(s, count, [&](int64_t k, int64_t j) {
      const float* xp = ptr(x, k, j);
      const V mk = S::splat(m[k]);
      V a = acc[k];
      chunks(run_length(s, j), [&](int64_t i, int64_t r) { a = S::add(a, exp_lanes(S::sub(S::ld(xp + i, r, -kInf), mk))); });
      acc[k] = a;
    });
    float ls[kMaxBlockRows];
    for (int64_t k = 0; k < count; ++k) ls[k] = std::log(S::hsum(acc[k]));
    each_run(s, count, [&](int64_t k, int64_t j) {  // (x - max) - log(sum): exact where x is near max
      const float* xp = ptr(x, k, j);
      float* op = ptr(out, k, j);
      const V mk = S::splat(m[k]), lk = S::splat(ls[k]);
      const bool z = zero[k];
      chunks(run_length(s, j), [&](int64_t i, int64_t r) {
        S::st(op + i, r, z ? S::zeros() : S::sub(S::sub(S::ld(xp + i, r, 0), mk), lk));
      });
    });
    return;
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x, k, j);
    float* op = ptr(out, k, j);
    const V mk = S::splat(m[k]);
    V a = acc[k];
    chunks(run_length(s, j), [&](int64_t i, int64_t r) {
      const V e = exp_lanes(S::sub(S::ld(xp + i, r, -kInf), mk));
      S::st(op + i, r, e);
      a = S::add(a, S::keep(e, r));
    });
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) m[k] = zero[k] ? 0.0f : 1.0f / S::hsum(acc[k]);
  each_run(s, count, [&](int64_t k, int64_t j) {
    float* op = ptr(out, k, j);
    const V scale = S::splat(m[k]);
    const bool z = zero[k];
    chunks(run_length(s, j), [&](int64_t i, int64_t r) { S::st(op + i, r, z ? S::zeros() : S::mul(S::ld(op + i, r, 0), scale)); });
  });
}

template <int64_t R>
void softmax_backward_runs(RowShape s, int64_t count, Row g, Row y, Row out, bool log) {
  if (R) s.run = s.last = R;
  using V = S::V;
  V acc[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) acc[k] = S::zeros();
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g, k, j), *yp = ptr(y, k, j);
    V a = acc[k];
    if (log) {
      chunks(run_length(s, j), [&](int64_t i, int64_t r) { a = S::add(a, S::ld(gp + i, r, 0)); });
    } else {
      chunks(run_length(s, j), [&](int64_t i, int64_t r) { a = S::fmadd(S::ld(gp + i, r, 0), S::ld(yp + i, r, 0), a); });
    }
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) acc[k] = S::splat(S::hsum(acc[k]));
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g, k, j), *yp = ptr(y, k, j);
    float* op = ptr(out, k, j);
    const V a = acc[k];
    if (log) {  // g - exp(y) * sum(g)
      chunks(run_length(s, j), [&](int64_t i, int64_t r) {
        S::st(op + i, r, S::fnmadd(exp_lanes(S::ld(yp + i, r, 0)), a, S::ld(gp + i, r, 0)));
      });
    } else {  // y * (g - sum(g * y))
      chunks(run_length(s, j), [&](int64_t i, int64_t r) {
        S::st(op + i, r, S::mul(S::ld(yp + i, r, 0), S::sub(S::ld(gp + i, r, 0), a)));
      });
    }
  });
}

template <int64_t R>
void layer_norm_runs(RowShape s, int64_t count, Row x, Row out, const float* w, const float* b, float eps,
                     float* mean, float* rstd, bool rms) {
  if (R) s.run = s.last = R;
  using V = S::V;
  const float n = static_cast<float>(row_length(s));
  V acc[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) acc[k] = S::zeros();
  if (!rms) {  // RMS norm: no mean (0), the second pass sums the squares
    each_run(s, count, [&](int64_t k, int64_t j) {
      const float* xp = ptr(x, k, j);
      V a = acc[k];
      chunks(run_length(s, j), [&](int64_t i, int64_t r) { a = S::add(a, S::ld(xp + i, r, 0)); });
      acc[k] = a;
    });
  }
  for (int64_t k = 0; k < count; ++k) {
    mean[k] = rms ? 0.0f : S::hsum(acc[k]) / n;
    acc[k] = S::zeros();
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x, k, j);
    const V mk = S::splat(mean[k]);
    V a = acc[k];
    chunks(run_length(s, j), [&](int64_t i, int64_t r) {
      const V d = S::sub(S::ld(xp + i, r, mean[k]), mk);
      a = S::fmadd(d, d, a);
    });
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) {
    const float var = S::hsum(acc[k]) / n;
    rstd[k] = 1.0f / std::sqrt((var > 0.0f ? var : 0.0f) + eps);
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x, k, j);
    float* op = ptr(out, k, j);
    const float *wj = w ? w + j * s.run : nullptr, *bj = b ? b + j * s.run : nullptr;
    const V mk = S::splat(mean[k]), rk = S::splat(rstd[k]);
    chunks(run_length(s, j), [&](int64_t i, int64_t r) {
      V v = S::mul(S::sub(S::ld(xp + i, r, 0), mk), rk);
      if (wj) v = S::mul(v, S::ld(wj + i, r, 0));
      if (bj) v = S::add(v, S::ld(bj + i, r, 0));
      S::st(op + i, r, v);
    });
  });
}

// The input gradient of layer norm's backward from the rows' sums of g * w (sa) and of
// g * w * (x - mean) (sb), each still a vector to add up; nothing where out has no rows. With
// a = mean(gw) and c = mean(gw * xhat) = rstd mean(gw * (x - mean)), the gradient
// rstd * (gw - a - xhat * c) is rstd (gw - a) + B (x - mean) with B = -rstd^2 c: four ops an
// element. ATen's forms cancel large terms: its sums (mean(gw * x) - mean a) lost the digits of a
// row of two close values, its A gw + B x + C left rstd * gw's rounding where a row's gradient is
// 0 (one element: 2e-5 at rstd 316), each beyond float64's 1e-5.
template <int64_t R>
void layer_norm_backward_input(RowShape s, int64_t count, Row g, Row x, Row out, const float* mean,
                               const float* rstd, const float* w, S::V* sa, S::V* sb, bool rms) {
  if (R) s.run = s.last = R;
  using V = S::V;
  if (!out.base) return;
  const float n = static_cast<float>(row_length(s));
  for (int64_t k = 0; k < count; ++k) {  // the sums' vectors become a row's a and B
    const float r = rstd[k];
    sa[k] = rms ? S::zeros() : S::splat(S::hsum(sa[k]) / n);  // RMS norm: no mean, no sum(gw) term
    sb[k] = S::splat(-r * r * (r * S::hsum(sb[k]) / n));
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g, k, j), *xp = ptr(x, k, j), *wj = w ? w + j * s.run : nullptr;
    float* op = ptr(out, k, j);
    const V rk = S::splat(rstd[k]), mk = S::splat(mean[k]), ak = sa[k], bk = sb[k];
    chunks(run_length(s, j), [&](int64_t i, int64_t r) {
      const V gv = S::ld(gp + i, r, 0);
      const V gw = wj ? S::mul(gv, S::ld(wj + i, r, 0)) : gv;
      S::st(op + i, r, S::fmadd(bk, S::sub(S::ld(xp + i, r, 0), mk), S::mul(rk, S::sub(gw, ak))));
    });
  });
}

template <int64_t R>
void layer_norm_backward_runs(RowShape s, int64_t count, Row g, Row x, Row out, const float* mean,
                              const float* rstd, const float* w, float* dgamma, float* dbeta, bool rms) {
  if (R) s.run = s.last = R;
  using V = S::V;
  V sa[kMaxBlockRows], sb[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) sa[k] = sb[k] = S::zeros();
  if constexpr (R != 0 && R % S::kLanes == 0) {
    if (dgamma || dbeta) {  // a run's column sums stay in registers over the block's rows
      constexpr int64_t kC = R / S::kLanes;
      for (int64_t j = 0; j < s.runs; ++j) {
        const float* wj = w ? w + j * R : nullptr;
        float *dg = dgamma ? dgamma + j * R : nullptr, *db = dbeta ? dbeta + j * R : nullptr;
        V gsum[kC], bsum[kC];
        for (int64_t c = 0; c < kC; ++c) {
          gsum[c] = dg ? S::ld(dg + c * S::kLanes, S::kLanes, 0) : S::zeros();
          bsum[c] = db ? S::ld(db + c * S::kLanes, S::kLanes, 0) : S::zeros();
        }
        for (int64_t k = 0; k < count; ++k) {
          const float *gp = ptr(g, k, j), *xp = ptr(x, k, j);
          const V mk = S::splat(mean[k]), rk = S::splat(rstd[k]);
          V a = sa[k], c2 = sb[k];
          for (int64_t c = 0; c < kC; ++c) {
            const int64_t i = c * S::kLanes;
            const V gv = S::ld(gp + i, S::kLanes, 0), xm = S::sub(S::ld(xp + i, S::kLanes, 0), mk);
            gsum[c] = S::fmadd(gv, S::mul(xm, rk), gsum[c]);
            bsum[c] = S::add(gv, bsum[c]);
            if (!out.base) continue;
            const V gw = wj ? S::mul(gv, S::ld(wj + i, S::kLanes, 0)) : gv;
            a = S::add(a, gw);
            c2 = S::fmadd(gw, xm, c2);
          }
          sa[k] = a;
          sb[k] = c2;
        }
        for (int64_t c = 0; c < kC; ++c) {
          if (dg) S::st(dg + c * S::kLanes, S::kLanes, gsum[c]);
          if (db) S::st(db + c * S::kLanes, S::kLanes, bsum[c]);
        }
      }
      return layer_norm_backward_input<R>(s, count, g, x, out, mean, rstd, w, sa, sb, rms);
    }
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g, k, j), *xp = ptr(x, k, j), *wj = w ? w + j * s.run : nullptr;
    float *dg = dgamma ? dgamma + j * s.run : nullptr, *db = dbeta ? dbeta + j * s.run : nullptr;
    const V mk = S::splat(mean[k]), rk = S::splat(rstd[k]);
    V a = sa[k], c = sb[k];
    chunks(run_length(s, j), [&](int64_t i, int64_t r) {
      const V gv = S::ld(gp + i, r, 0), xm = S::sub(S::ld(xp + i, r, 0), mk);
      if (dg) S::st(dg + i, r, S::fmadd(gv, S::mul(xm, rk), S::ld(dg + i, r, 0)));
      if (db) S::st(db + i, r, S::add(gv, S::ld(db + i, r, 0)));
      const V gw = wj ? S::mul(gv, S::ld(wj + i, r, 0)) : gv;
      a = S::add(a, gw);
      c = S::fmadd(gw, xm, c);
    });
    sa[k] = a;
    sb[k] = c;
  });
  layer_norm_backward_input<R>(s, count, g, x, out, mean, rstd, w, sa, sb, rms);
}

// Runs of R floats known at compile time where a run is a float32 stick (32) or a float16 one
// gathered into float32 (64), the last one too: every chunk loop then unrolls with no tail;
// R = 0 reads s.run and s.last.
template <typename F>
inline void with_run(RowShape s, F f) {
  if (s.last == s.run && s.run == 32) return f(std::integral_constant<int64_t, 32>{});
  if (s.last == s.run && s.run == 64) return f(std::integral_constant<int64_t, 64>{});
  f(std::integral_constant<int64_t, 0>{});
}

void softmax(RowShape s, int64_t count, Row x, Row out, bool log, bool safe) {
  with_run(s, [&](auto r) { softmax_runs<decltype(r)::value>(s, count, x, out, log, safe); });
}

void softmax_backward(RowShape s, int64_t count, Row g, Row y, Row out, bool log) {
  with_run(s, [&](auto r) { softmax_backward_runs<decltype(r)::value>(s, count, g, y, out, log); });
}

void layer_norm(RowShape s, int64_t count, Row x, Row out, const float* w, const float* b, float eps, float* mean,
                float* rstd, bool rms) {
  with_run(s, [&](auto r) { layer_norm_runs<decltype(r)::value>(s, count, x, out, w, b, eps, mean, rstd, rms); });
}

void layer_norm_backward(RowShape s, int64_t count, Row g, Row x, Row out, const float* mean, const float* rstd,
                         const float* w, float* dgamma, float* dbeta, bool rms) {
  with_run(s, [&](auto r) {
    layer_norm_backward_runs<decltype(r)::value>(s, count, g, x, out, mean, rstd, w, dgamma, dbeta, rms);
  });
}

// 1 / (1 + e^-x); 1 - 2 / (e^2x + 1) (within a few 1e-8 of tanh near 0, where it cancels).
inline S::V sigmoid_lanes(S::V x) {
  return S::div(S::splat(1.0f), S::add(S::splat(1.0f), exp_lanes(S::sub(S::zeros(), x))));
}
inline S::V tanh_lanes(S::V x) {
  return S::sub(S::splat(1.0f), S::div(S::splat(2.0f), S::add(exp_lanes(S::add(x, x)), S::splat(1.0f))));
}

void lstm_cell(int64_t n, const float* const* ig, const float* const* hg, const float* const* ib,
               const float* const* hb, const float* cx, float* hy, float* cy, float* const* ws) {
  using V = S::V;
  chunks(n, [&](int64_t j, int64_t r) {
    V gate[4];
    for (int64_t k = 0; k < 4; ++k) {
      V in = S::ld(ig[k] + j, r, 0), h = S::ld(hg[k] + j, r, 0);
      if (ib) in = S::add(in, S::ld(ib[k] + j, r, 0));
      if (hb) h = S::add(h, S::ld(hb[k] + j, r, 0));
      gate[k] = S::add(in, h);
    }
    const V i = sigmoid_lanes(gate[0]), f = sigmoid_lanes(gate[1]), g = tanh_lanes(gate[2]);
    const V o = sigmoid_lanes(gate[3]);
    const V c = S::add(S::mul(f, S::ld(cx + j, r, 0)), S::mul(i, g));
    S::st(cy + j, r, c);
    S::st(hy + j, r, S::mul(o, tanh_lanes(c)));
    const V act[4] = {i, f, g, o};
    for (int64_t k = 0; k < 4; ++k) S::st(ws[k] + j, r, act[k]);
  });
}

void lstm_cell_backward(int64_t n, const float* ghy, const float* gcy, const float* cx, const float* cy,
                        const float* const* ws, float* const* gg, float* gcx, float* const* gbias) {
  using V = S::V;
  const V one = S::splat(1.0f);
  chunks(n, [&](int64_t j, int64_t r) {
    const V i = S::ld(ws[0] + j, r, 0), f = S::ld(ws[1] + j, r, 0), g = S::ld(ws[2] + j, r, 0);
    const V o = S::ld(ws[3] + j, r, 0), t = tanh_lanes(S::ld(cy + j, r, 0));
    const V gh = ghy ? S::ld(ghy + j, r, 0) : S::zeros();
    const V gc = S::add(gcy ? S::ld(gcy + j, r, 0) : S::zeros(), S::mul(S::mul(gh, o), S::sub(one, S::mul(t, t))));
    const V grads[4] = {S::mul(S::mul(S::mul(gc, g), i), S::sub(one, i)),
                        S::mul(S::mul(S::mul(gc, S::ld(cx + j, r, 0)), f), S::sub(one, f)),
                        S::mul(S::mul(gc, i), S::sub(one, S::mul(g, g))),
                        S::mul(S::mul(S::mul(gh, t), o), S::sub(one, o))};
    for (int64_t k = 0; k < 4; ++k) {
      S::st(gg[k] + j, r, grads[k]);
      if (gbias) S::st(gbias[k] + j, r, S::add(S::ld(gbias[k] + j, r, 0), grads[k]));
    }
    S::st(gcx + j, r, S::mul(gc, f));
  });
}

void gru_cell(int64_t n, const float* const* ig, const float* const* hg, const float* const* ib,
              const float* const* hb, const float* hx, float* hy, float* const* ws) {
  using V = S::V;
  chunks(n, [&](int64_t j, int64_t r) {
    V in[3], h[3];
    for (int64_t k = 0; k < 3; ++k) {
      in[k] = S::ld(ig[k] + j, r, 0), h[k] = S::ld(hg[k] + j, r, 0);
      if (ib) in[k] = S::add(in[k], S::ld(ib[k] + j, r, 0));
      if (hb) h[k] = S::add(h[k], S::ld(hb[k] + j, r, 0));
    }
    const V rg = sigmoid_lanes(S::add(in[0], h[0])), z = sigmoid_lanes(S::add(in[1], h[1]));
    const V nv = tanh_lanes(S::add(in[2], S::mul(rg, h[2])));
    const V x = S::ld(hx + j, r, 0);
    S::st(hy + j, r, S::add(nv, S::mul(z, S::sub(x, nv))));
    const V saved[5] = {rg, z, nv, x, h[2]};
    for (int64_t k = 0; k < 5; ++k) S::st(ws[k] + j, r, saved[k]);
  });
}

void gru_cell_backward(int64_t n, const float* ghy, const float* const* ws, float* const* gi, float* const* gh,
                       float* ghx, float* const* gbi, float* const* gbh) {
  using V = S::V;
  const V one = S::splat(1.0f);
  chunks(n, [&](int64_t j, int64_t r) {
    const V rg = S::ld(ws[0] + j, r, 0), z = S::ld(ws[1] + j, r, 0), nv = S::ld(ws[2] + j, r, 0);
    const V x = S::ld(ws[3] + j, r, 0), hn = S::ld(ws[4] + j, r, 0), g = S::ld(ghy + j, r, 0);
    const V grad_n = S::mul(S::mul(g, S::sub(one, z)), S::sub(one, S::mul(nv, nv)));
    const V grad_z = S::mul(S::mul(S::mul(g, S::sub(x, nv)), z), S::sub(one, z));
    const V grad_r = S::mul(S::mul(S::mul(grad_n, hn), rg), S::sub(one, rg));
    const V input[3] = {grad_r, grad_z, grad_n}, hidden[3] = {grad_r, grad_z, S::mul(grad_n, rg)};
    for (int64_t k = 0; k < 3; ++k) {
      S::st(gi[k] + j, r, input[k]);
      S::st(gh[k] + j, r, hidden[k]);
      if (gbi) {
        S::st(gbi[k] + j, r, S::add(S::ld(gbi[k] + j, r, 0), input[k]));
        S::st(gbh[k] + j, r, S::add(S::ld(gbh[k] + j, r, 0), hidden[k]));
      }
    }
    S::st(ghx + j, r, S::mul(g, z));
  });
}

float sum(const float* x, int64_t n) {
  using V = S::V;
  V s0 = S::zeros(), s1 = S::zeros();
  int64_t i = 0;
  for (; i + 2 * S::kLanes <= n; i += 2 * S::kLanes) {
    s0 = S::add(s0, S::ld(x + i, S::kLanes, 0));
    s1 = S::add(s1, S::ld(x + i + S::kLanes, S::kLanes, 0));
  }
  chunks(n - i, [&](int64_t k, int64_t r) { s0 = S::add(s0, S::ld(x + i + k, r, 0)); });
  return S::hsum(S::add(s0, s1));
}
