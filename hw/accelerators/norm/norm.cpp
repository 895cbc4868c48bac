// norm (Min-Max normalisation): (x - min) / (max - min) per single-precision
// value, min and max over the whole request (docs/frac.md §2.5, §5).
//
// Request: header line + N lines of 16 x f32 LE, N <= 256 (the unit's line
// buffer). Answer: one line per data line (request size - 64 bytes). Every
// operation is IEEE single precision, round-to-nearest-even, with subnormal
// inputs and results flushed to zero, so the answer is bit-exact; an
// all-equal input gives 0/0 = NaN, as on the board. NaN inputs never become
// the min or max (the comparisons are false) and give NaN in their lane.
//
// More than 256 data lines: the real unit never finishes and takes nothing
// more until reloaded; this model answers FRAC_KERNEL_ENOANSWER and the
// emulator decides what the connection sees.
//
// Two passes over the line buffer: min/max, then normalise.
#include <math.h>
#include <string.h>

#include "frac_kernel.h"

namespace {

const uint32_t MAX_DATA_LINES = 256;

inline float ftz(float v) {
#pragma HLS INLINE
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
    memcpy(&v, &bits, sizeof v);
    return v;
}

inline float load_f32(const uint8_t* p) {
    const uint32_t bits = frac::load_u32(p);
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

}  // namespace

extern "C" int32_t frac_kernel_abi_version(void) { return FRAC_KERNEL_ABI_VERSION; }

extern "C" const char* frac_kernel_name(void) { return "norm"; }

extern "C" int64_t frac_kernel_run(const uint8_t* request, uint32_t request_len,
                                   uint16_t top_config, uint8_t* response,
                                   uint32_t response_cap) {
#pragma HLS INTERFACE axis port = request
#pragma HLS INTERFACE axis port = response
    (void)top_config;
    const int64_t bad = frac::check_request(request, request_len);
    if (bad != 0) return bad;
    const uint32_t out_len = request_len - FRAC_LINE;
    if (out_len / FRAC_LINE > MAX_DATA_LINES) return FRAC_KERNEL_ENOANSWER;
    if (out_len == 0) return 0;
    if (response == nullptr || response_cap < out_len) return FRAC_KERNEL_ECAP;
    const uint8_t* data = request + FRAC_LINE;

    // Pass 1: min and max while the lines fill the buffer.
    float lo = INFINITY;
    float hi = -INFINITY;
    for (uint32_t off = 0; off < out_len; off += 4) {
#pragma HLS PIPELINE II = 1
        const float x = ftz(load_f32(data + off));
        if (x < lo) lo = x;
        if (x > hi) hi = x;
    }
    const float range = ftz(hi - lo);

    // Pass 2: normalise from the buffer.
    for (uint32_t off = 0; off < out_len; off += 4) {
#pragma HLS PIPELINE II = 1
        const float x = ftz(load_f32(data + off));
        const float y = ftz(ftz(x - lo) / range);
        uint32_t bits;
        memcpy(&bits, &y, sizeof bits);
        frac::store_u32(response + off, bits);
    }
    return out_len;
}
