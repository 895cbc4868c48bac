// cnn: a small integer image classifier of our own (the artifact's A4 unit is
// an hls4ml model we do not have; this one only keeps its interface and its
// "real compute per request" character). Layout and arithmetic: README.md in
// this directory. The Rust model in engine/emulator/tests must match it bit
// for bit, so every step is integer arithmetic with explicit rounding.
//
// Network (input 64 x 64 pixels x 3 channels, int16):
//   conv1 3x3, 3 -> 16 channels, zero padding, + bias, >> 6, ReLU, clamp 32767
//   maxpool 2x2                                   -> 32 x 32 x 16
//   conv2 3x3, 16 -> 32 channels, zero padding, + bias, >> 7, ReLU, clamp
//   maxpool 2x2                                   -> 16 x 16 x 32
//   dense 8192 -> 10, + bias, >> 8 (floor), clamp to int16  -> ten scores
// About 6.6 million multiply-accumulates per request, whatever its size.
//
// Weights and biases are ROMs generated at compile time by a fixed integer
// formula (cnn_weight below), so the unit needs no data files and every build
// has the same parameters.
#include <stdlib.h>

#include "frac_kernel.h"

namespace {

constexpr int IN_H = 64, IN_W = 64, IN_C = 3;
constexpr int C1 = 16, C2 = 32, CLASSES = 10;
constexpr int P1_H = IN_H / 2, P1_W = IN_W / 2;  // after conv1 + pool
constexpr int P2_H = P1_H / 2, P2_W = P1_W / 2;  // after conv2 + pool
constexpr int FLAT = P2_H * P2_W * C2;
constexpr int SHIFT1 = 6, SHIFT2 = 7, SHIFT3 = 8;
constexpr int IN_VALUES = IN_H * IN_W * IN_C;

// Parameter tags: each ROM draws from its own stream of the formula.
constexpr uint32_t TAG_W1 = 1, TAG_B1 = 2, TAG_W2 = 3, TAG_B2 = 4, TAG_WD = 5, TAG_BD = 6;

// A 32-bit integer finaliser (xor-shift-multiply); any fixed mixing works,
// this one spreads consecutive indices well.
constexpr uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// Weight `index` of ROM `tag`: an integer in [-7, 7].
constexpr int8_t cnn_weight(uint32_t tag, uint32_t index) {
    return (int8_t)((int32_t)(mix32((tag << 24) | index) % 15u) - 7);
}

// Bias `index` of ROM `tag`: an integer in [-1024, 1024].
constexpr int32_t cnn_bias(uint32_t tag, uint32_t index) {
    return (int32_t)(mix32((tag << 24) | index) % 2049u) - 1024;
}

template <int N>
struct Rom {
    int8_t v[N];
};

template <int N>
constexpr Rom<N> make_weights(uint32_t tag) {
    Rom<N> rom{};
    for (int i = 0; i < N; ++i) rom.v[i] = cnn_weight(tag, (uint32_t)i);
    return rom;
}

template <int N>
struct BiasRom {
    int32_t v[N];
};

template <int N>
constexpr BiasRom<N> make_biases(uint32_t tag) {
    BiasRom<N> rom{};
    for (int i = 0; i < N; ++i) rom.v[i] = cnn_bias(tag, (uint32_t)i);
    return rom;
}

// Index orders: conv weights [out][in][ky][kx]; dense weights [class][y][x][c].
constexpr Rom<C1 * IN_C * 9> W1 = make_weights<C1 * IN_C * 9>(TAG_W1);
constexpr BiasRom<C1> B1 = make_biases<C1>(TAG_B1);
constexpr Rom<C2 * C1 * 9> W2 = make_weights<C2 * C1 * 9>(TAG_W2);
constexpr BiasRom<C2> B2 = make_biases<C2>(TAG_B2);
constexpr Rom<CLASSES * FLAT> WD = make_weights<CLASSES * FLAT>(TAG_WD);
constexpr BiasRom<CLASSES> BD = make_biases<CLASSES>(TAG_BD);

// floor(v / 2^s) without relying on how >> treats negative numbers.
inline int64_t floor_shift(int64_t v, int s) {
    return v >= 0 ? (v >> s) : -((-v + ((int64_t)1 << s) - 1) >> s);
}

// ReLU, then saturate to int16's positive range.
inline int16_t relu_q(int32_t acc, int shift) {
    const int64_t v = floor_shift(acc, shift);
    if (v <= 0) return 0;
    return (int16_t)(v > 32767 ? 32767 : v);
}

// conv3x3 + bias + requantise + ReLU, then 2x2 max pooling, fused: the max of
// four requantised ReLU outputs equals the requantised ReLU of the largest
// accumulator, but the four are computed separately to stay a plain model.
template <int H, int W, int CI, int CO>
void conv_relu_pool(const int16_t* in, const int8_t* w, const int32_t* b, int shift,
                    int16_t* out) {
    for (int py = 0; py < H / 2; ++py) {
        for (int px = 0; px < W / 2; ++px) {
            for (int co = 0; co < CO; ++co) {
#pragma HLS PIPELINE II = 1
                int16_t best = 0;
                for (int dy = 0; dy < 2; ++dy) {
                    for (int dx = 0; dx < 2; ++dx) {
                        const int y = 2 * py + dy;
                        const int x = 2 * px + dx;
                        int32_t acc = b[co];
                        for (int ky = 0; ky < 3; ++ky) {
                            const int iy = y + ky - 1;
                            if (iy < 0 || iy >= H) continue;
                            for (int kx = 0; kx < 3; ++kx) {
                                const int ix = x + kx - 1;
                                if (ix < 0 || ix >= W) continue;
                                const int16_t* pix = in + (iy * W + ix) * CI;
                                const int8_t* wk = w + (co * CI * 9) + ky * 3 + kx;
                                for (int ci = 0; ci < CI; ++ci) {
#pragma HLS UNROLL
                                    acc += (int32_t)pix[ci] * (int32_t)wk[ci * 9];
                                }
                            }
                        }
                        const int16_t v = relu_q(acc, shift);
                        if (v > best) best = v;
                    }
                }
                out[(py * (W / 2) + px) * CO + co] = best;
            }
        }
    }
}

}  // namespace

extern "C" int32_t frac_kernel_abi_version(void) { return FRAC_KERNEL_ABI_VERSION; }

extern "C" const char* frac_kernel_name(void) { return "cnn"; }

extern "C" int64_t frac_kernel_run(const uint8_t* request, uint32_t request_len,
                                   uint16_t top_config, uint8_t* response,
                                   uint32_t response_cap) {
#pragma HLS INTERFACE axis port = request
#pragma HLS INTERFACE axis port = response
    (void)top_config;
    const int64_t bad = frac::check_request(request, request_len);
    if (bad != 0) return bad;
    if (response == nullptr || response_cap < FRAC_LINE) return FRAC_KERNEL_ECAP;

    // Working memory on the heap: the feature maps (72 KB) would not fit the
    // small stacks of the emulator's connection threads.
    const size_t image_n = (size_t)IN_VALUES;
    const size_t p1_n = (size_t)P1_H * P1_W * C1;
    const size_t p2_n = (size_t)FLAT;
    int16_t* mem = (int16_t*)calloc(image_n + p1_n + p2_n, sizeof(int16_t));
    if (mem == nullptr) return FRAC_KERNEL_ENOMEM;
    int16_t* image = mem;
    int16_t* p1 = image + image_n;
    int16_t* p2 = p1 + p1_n;

    // Packet parser: the header line is consumed; value i of the data is
    // channel i % 3 of pixel i / 3, pixels in raster order; missing values
    // stay zero, values past the image are ignored.
    const uint32_t data_len = request_len - FRAC_LINE;
    uint32_t n_values = data_len / 2;
    if (n_values > (uint32_t)IN_VALUES) n_values = (uint32_t)IN_VALUES;
    for (uint32_t i = 0; i < n_values; ++i) {
#pragma HLS PIPELINE II = 1
        image[i] = (int16_t)frac::load_u16(request + FRAC_LINE + 2 * i);
    }

    conv_relu_pool<IN_H, IN_W, IN_C, C1>(image, W1.v, B1.v, SHIFT1, p1);
    conv_relu_pool<P1_H, P1_W, C1, C2>(p1, W2.v, B2.v, SHIFT2, p2);

    for (int i = 0; i < FRAC_LINE; ++i) response[i] = 0;
    for (int k = 0; k < CLASSES; ++k) {
        int64_t acc = BD.v[k];
        const int8_t* wk = WD.v + (size_t)k * FLAT;
        for (int j = 0; j < FLAT; ++j) {
#pragma HLS PIPELINE II = 1
            acc += (int64_t)p2[j] * (int64_t)wk[j];
        }
        int64_t score = floor_shift(acc, SHIFT3);
        if (score > 32767) score = 32767;
        if (score < -32768) score = -32768;
        frac::store_u16(response + 2 * k, (uint16_t)(int16_t)score);
    }
    free(mem);
    return FRAC_LINE;
}
