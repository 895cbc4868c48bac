// pattern_slot: the echo test unit (docs/frac.md §2.5, §5).
//
// Every line of the request, header included, is answered unchanged, so the
// response is exactly as long as the request. The Figure 13 throughput runs
// use this unit.
#include "frac_kernel.h"

extern "C" int32_t frac_kernel_abi_version(void) { return FRAC_KERNEL_ABI_VERSION; }

extern "C" const char* frac_kernel_name(void) { return "pattern_slot"; }

extern "C" int64_t frac_kernel_run(const uint8_t* request, uint32_t request_len,
                                   uint16_t top_config, uint8_t* response,
                                   uint32_t response_cap) {
#pragma HLS INTERFACE axis port = request
#pragma HLS INTERFACE axis port = response
    (void)top_config;
    const int64_t bad = frac::check_request(request, request_len);
    if (bad != 0) return bad;
    if (response == nullptr || response_cap < request_len) return FRAC_KERNEL_ECAP;
    // One beat in, one beat out.  Copied line by line rather than with one
    // memcpy of the whole request: glibc copies kilobytes with `rep movsb`,
    // which some x86 CPUs run several times slower than the line loop (seen
    // in the echo bench's profile on an AMD EPYC VM).
    for (uint32_t at = 0; at < request_len; at += FRAC_LINE) {
#pragma HLS PIPELINE II = 1
        __builtin_memcpy(response + at, request + at, FRAC_LINE);
    }
    return request_len;
}
