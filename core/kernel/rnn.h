// File: core/kernel/rnn.h
// The pointwise part of one recurrent time step, forward and backward, written
// once for the CPU loop and the CUDA kernel: everything a step does after its
// matrix products (gx = x W_ih^T + b_ih, gh = h W_hh^T + b_hh), for one hidden
// unit j of one sample. Gate order is PyTorch's: LSTM i, f, g, o; GRU r, z, n.
//
// N batch, H hidden units, G gates (1, 4 or 3).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/kernel/activation.h"
#include "core/kernel/host_device.h"
#include "core/strided.h"

namespace loom {

enum class RnnMode : uint8_t { Tanh, Relu, Lstm, Gru };

namespace kernel {

// G: the gate rows of W_ih and W_hh (LSTM i, f, g, o; GRU r, z, n).
LOOM_HOST_DEVICE constexpr int rnn_gates(RnnMode mode) {
  return mode == RnnMode::Lstm ? 4 : mode == RnnMode::Gru ? 3 : 1;
}

// The views of one step: each (N, columns), unit column stride, any row
// stride; a view a mode does not use stays null.
struct RnnStep {
  RnnMode mode = RnnMode::Tanh;
  int64_t hidden = 0;  // H
  Strided gx, gh;      // (N, G*H): the step's two products (forward), gh without its bias
  Strided bias;        // (G*H): b_hh, added to gh here (GRU's n needs it inside r (W_hn h + b_hn)), or null
  Strided prev;        // (N, H): c before the step (LSTM), h before it (GRU)
  Strided gates;       // (N, G*H): LSTM i, f, g, o; GRU r, z, n, after their activations
  Strided aux;         // (N, H): LSTM c after the step; GRU W_hn h + b_hn
  Strided h;           // (N, H): h after the step (written forward, read backward)
  Strided dh, dy;      // (N, H): h's gradient from the next step and from the output (backward)
  Strided dc;          // (N, H): LSTM, c's gradient from the next step, replaced by c before the step's
  Strided dgx, dgh;    // (N, G*H): the products' gradients (dgh: GRU only; the others share dgx)
  Strided dh_direct;   // (N, H): GRU, the part of h before the step's gradient not through W_hh (dh z)
};

// Every step of one layer and direction at once, for a kernel that runs the
// whole recurrence in one launch: the tensors an RnnStep views one time step
// of, whole and dense ((L, N, columns), rows of G*H or H), beside the weights
// and the states before the first step. Forward reads gx, w_hh, bias, h0, c0
// and writes out, gates, aux; backward also reads dy and dc (c's gradient
// after the last step, replaced by c0's) and writes dgx, dgh and dh0.
struct RnnRun {
  RnnMode mode = RnnMode::Tanh;
  bool reverse = false;
  Strided w_hh, bias;          // (G*H, H); (G*H) or null
  Strided h0, c0;              // (N, H); c0 LSTM only
  Strided gx, gates, aux, out;  // as RnnStep's, one row of L each
  Strided dy, dc, dgx, dgh;    // as RnnStep's; dgh GRU only
  Strided dh0;                 // (N, H): h0's gradient
};

// Unit j of one sample: `g` points at the sample's gate row (stride H between
// gates), the rest at the unit's own element.
template <class C>
struct RnnUnit {
  // y = act(gx + gh).
  LOOM_HOST_DEVICE static C simple_forward(RnnMode mode, C gx, C gh) {
    const C a = gx + gh;
    return mode == RnnMode::Tanh ? std::tanh(a) : (a > C(0) ? a : C(0));
  }
  // d(pre-activation) from dh and the step's output y.
  LOOM_HOST_DEVICE static C simple_backward(RnnMode mode, C dh, C y) {
    return mode == RnnMode::Tanh ? dh * (C(1) - y * y) : (y > C(0) ? dh : C(0));
  }

  // act[k] = the gates, c = f c_prev + i g, returns h = o tanh(c).
  LOOM_HOST_DEVICE static C lstm_forward(const C* a, C c_prev, C* act, C& c) {
    act[0] = act::logistic(a[0]);
    act[1] = act::logistic(a[1]);
    act[2] = std::tanh(a[2]);
    act[3] = act::logistic(a[3]);
    c = act[1] * c_prev + act[0] * act[2];
    return act[3] * std::tanh(c);
  }
  // da[k] from dh and dc (c's gradient from the next step, replaced by c_prev's).
  LOOM_HOST_DEVICE static void lstm_backward(const C* act, C c, C c_prev, C dh, C& dc, C* da) {
    const C i = act[0], f = act[1], g = act[2], o = act[3];
    const C tanh_c = std::tanh(c);
    const C dc_t = dc + dh * o * (C(1) - tanh_c * tanh_c);
    da[0] = dc_t * g * i * (C(1) - i);
    da[1] = dc_t * c_prev * f * (C(1) - f);
    da[2] = dc_t * i * (C(1) - g * g);
    da[3] = dh * tanh_c * o * (C(1) - o);
    dc = dc_t * f;
  }

  // act = r, z, n; hn = W_hn h + b_hn (gh[2]); returns h' = n + z (h - n).
  LOOM_HOST_DEVICE static C gru_forward(const C* gx, const C* gh, C h_prev, C* act, C& hn) {
    act[0] = act::logistic(gx[0] + gh[0]);
    act[1] = act::logistic(gx[1] + gh[1]);
    hn = gh[2];
    act[2] = std::tanh(gx[2] + act[0] * hn);
    return act[2] + act[1] * (h_prev - act[2]);
  }
  // dgx[k], dgh[k] (they differ in n's row: r scales hn) and dh z, the
  // gradient of h_prev that does not pass through W_hh.
  LOOM_HOST_DEVICE static void gru_backward(const C* act, C hn, C h_prev, C dh, C* dgx, C* dgh, C& dh_direct) {
    const C r = act[0], z = act[1], n = act[2];
    const C dn = dh * (C(1) - z) * (C(1) - n * n);
    dgx[0] = dgh[0] = dn * hn * r * (C(1) - r);
    dgx[1] = dgh[1] = dh * (h_prev - n) * z * (C(1) - z);
    dgx[2] = dn;
    dgh[2] = dn * r;
    dh_direct = dh * z;
  }
};

// An RnnStep's views as typed rows: what a kernel's threads read and write.
template <class T>
struct RnnRows {
  struct Rows {
    T* data = nullptr;
    int64_t stride = 0;  // between samples
    LOOM_HOST_DEVICE T* operator[](int64_t n) const { return data + n * stride; }
  };
  RnnMode mode = RnnMode::Tanh;
  int64_t hidden = 0;
  Rows gx, gh, bias, prev, gates, aux, h, dh, dy, dc, dgx, dgh, dh_direct;
};

template <class T>
typename RnnRows<T>::Rows rows_of(const Strided& v) {
  return v.data == nullptr ? typename RnnRows<T>::Rows{} : typename RnnRows<T>::Rows{v.ptr<T>(), v.strides[0]};
}

// T is the storage type (a backend's own 16-bit types included).
template <class T>
RnnRows<T> rnn_rows(const RnnStep& s) {
  return {s.mode,           s.hidden,          rows_of<T>(s.gx),  rows_of<T>(s.gh),  rows_of<T>(s.bias),
          rows_of<T>(s.prev), rows_of<T>(s.gates), rows_of<T>(s.aux), rows_of<T>(s.h), rows_of<T>(s.dh),
          rows_of<T>(s.dy),   rows_of<T>(s.dc),    rows_of<T>(s.dgx), rows_of<T>(s.dgh), rows_of<T>(s.dh_direct)};
}

// Element `column` of sample n's hidden product, with its bias.
template <class C, class Cvt, class T>
LOOM_HOST_DEVICE C hidden_product(const RnnRows<T>& r, int64_t n, int64_t column) {
  const C bias = r.bias.data == nullptr ? C(0) : Cvt::template in<C>(*r.bias[column]);
  return Cvt::template in<C>(r.gh[n][column]) + bias;
}

// One unit's forward step. Cvt::in<C>(T) loads a stored value into the
// compute type C, Cvt::out<T>(C) rounds one back (each backend's 16-bit types).
template <class C, class Cvt, class T>
LOOM_HOST_DEVICE void rnn_forward_unit(const RnnRows<T>& r, int64_t n, int64_t j) {
  using U = RnnUnit<C>;
  const int64_t H = r.hidden;
  const T* gx = r.gx[n];
  if (r.mode == RnnMode::Lstm) {
    C a[4], act[4], c;
    for (int k = 0; k < 4; ++k) a[k] = Cvt::template in<C>(gx[k * H + j]) + hidden_product<C, Cvt>(r, n, k * H + j);
    r.h[n][j] = Cvt::template out<T>(U::lstm_forward(a, Cvt::template in<C>(r.prev[n][j]), act, c));
    for (int k = 0; k < 4; ++k) r.gates[n][k * H + j] = Cvt::template out<T>(act[k]);
    r.aux[n][j] = Cvt::template out<T>(c);
  } else if (r.mode == RnnMode::Gru) {
    C x3[3], h3[3], act[3], hn;
    for (int k = 0; k < 3; ++k) {
      x3[k] = Cvt::template in<C>(gx[k * H + j]);
      h3[k] = hidden_product<C, Cvt>(r, n, k * H + j);
    }
    r.h[n][j] = Cvt::template out<T>(U::gru_forward(x3, h3, Cvt::template in<C>(r.prev[n][j]), act, hn));
    for (int k = 0; k < 3; ++k) r.gates[n][k * H + j] = Cvt::template out<T>(act[k]);
    r.aux[n][j] = Cvt::template out<T>(hn);
  } else {
    const C a = U::simple_forward(r.mode, Cvt::template in<C>(gx[j]), hidden_product<C, Cvt>(r, n, j));
    r.h[n][j] = Cvt::template out<T>(a);
  }
}

// One unit's backward step: h's gradient is dh (from the next step) + dy (from the output).
template <class C, class Cvt, class T>
LOOM_HOST_DEVICE void rnn_backward_unit(const RnnRows<T>& r, int64_t n, int64_t j) {
  using U = RnnUnit<C>;
  const int64_t H = r.hidden;
  const C dh = Cvt::template in<C>(r.dh[n][j]) + Cvt::template in<C>(r.dy[n][j]);
  T* dgx = r.dgx[n];
  if (r.mode == RnnMode::Lstm) {
    C act[4], da[4];
    for (int k = 0; k < 4; ++k) act[k] = Cvt::template in<C>(r.gates[n][k * H + j]);
    C dc = Cvt::template in<C>(r.dc[n][j]);
    U::lstm_backward(act, Cvt::template in<C>(r.aux[n][j]), Cvt::template in<C>(r.prev[n][j]), dh, dc, da);
    for (int k = 0; k < 4; ++k) dgx[k * H + j] = Cvt::template out<T>(da[k]);
    r.dc[n][j] = Cvt::template out<T>(dc);
  } else if (r.mode == RnnMode::Gru) {
    C act[3], dx3[3], dh3[3], direct;
    for (int k = 0; k < 3; ++k) act[k] = Cvt::template in<C>(r.gates[n][k * H + j]);
    U::gru_backward(act, Cvt::template in<C>(r.aux[n][j]), Cvt::template in<C>(r.prev[n][j]), dh, dx3, dh3, direct);
    for (int k = 0; k < 3; ++k) {
      dgx[k * H + j] = Cvt::template out<T>(dx3[k]);
      r.dgh[n][k * H + j] = Cvt::template out<T>(dh3[k]);
    }
    r.dh_direct[n][j] = Cvt::template out<T>(direct);
  } else {
    dgx[j] = Cvt::template out<T>(U::simple_backward(r.mode, dh, Cvt::template in<C>(r.h[n][j])));
  }
}

}  // namespace kernel
}  // namespace loom
