// log (Logit): ln(x / (1 - x)) per single-precision value (docs/frac.md
// §2.5, §5).
//
// Request: header line + N lines of 16 x f32 LE. Answer: one line per data
// line (request size - 64 bytes), each value replaced by its logit, computed
// as the unit's floating-point pipeline does: subtract, divide, natural log,
// each step in IEEE single precision with round-to-nearest-even and
// subnormals flushed to zero (inputs and every intermediate result). The
// Xilinx log core may differ from a correctly rounded log by 2 ulp; this
// C-simulation uses the C library's logf, which is within 1 ulp.
//
// The header line is consumed, never answered: a header-only request gets an
// empty answer (the real unit sends nothing).
#include <math.h>
#include <string.h>

#include "frac_kernel.h"

namespace {

// Flush-to-zero: a subnormal becomes a zero of the same sign, as the
// Xilinx floating-point cores do.
inline float ftz(float v) {
#pragma HLS INLINE
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
    memcpy(&v, &bits, sizeof v);
    return v;
}

inline float logit(float x) {
#pragma HLS INLINE
    const float in = ftz(x);
    const float one_minus = ftz(1.0f - in);  // fp subtract core
    const float ratio = ftz(in / one_minus);  // fp divide core
    return ftz(logf(ratio));                  // fp log core
}

}  // namespace

extern "C" int32_t frac_kernel_abi_version(void) { return FRAC_KERNEL_ABI_VERSION; }

extern "C" const char* frac_kernel_name(void) { return "log"; }

extern "C" int64_t frac_kernel_run(const uint8_t* request, uint32_t request_len,
                                   uint16_t top_config, uint8_t* response,
                                   uint32_t response_cap) {
#pragma HLS INTERFACE axis port = request
#pragma HLS INTERFACE axis port = response
    (void)top_config;
    const int64_t bad = frac::check_request(request, request_len);
    if (bad != 0) return bad;
    const uint32_t out_len = request_len - FRAC_LINE;
    if (out_len > 0 && (response == nullptr || response_cap < out_len)) return FRAC_KERNEL_ECAP;
    // Streams: each data line is answered as soon as its 16 lanes are done.
    for (uint32_t off = 0; off < out_len; off += 4) {
#pragma HLS PIPELINE II = 1
        const uint32_t bits_in = frac::load_u32(request + FRAC_LINE + off);
        float x;
        memcpy(&x, &bits_in, sizeof x);
        const float y = logit(x);
        uint32_t bits_out;
        memcpy(&bits_out, &y, sizeof bits_out);
        frac::store_u32(response + off, bits_out);
    }
    return out_len;
}
