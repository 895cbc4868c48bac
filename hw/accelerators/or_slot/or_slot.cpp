// or_slot: the OR-with-all-ones test unit (docs/frac.md §2.5, §5).
//
// Every line of the request, header included, is answered as the line OR all
// ones, i.e. 64 bytes of 0xff per request line.
#include "frac_kernel.h"

extern "C" int32_t frac_kernel_abi_version(void) { return FRAC_KERNEL_ABI_VERSION; }

extern "C" const char* frac_kernel_name(void) { return "or_slot"; }

extern "C" int64_t frac_kernel_run(const uint8_t* request, uint32_t request_len,
                                   uint16_t top_config, uint8_t* response,
                                   uint32_t response_cap) {
#pragma HLS INTERFACE axis port = request
#pragma HLS INTERFACE axis port = response
    (void)top_config;
    const int64_t bad = frac::check_request(request, request_len);
    if (bad != 0) return bad;
    if (response == nullptr || response_cap < request_len) return FRAC_KERNEL_ECAP;
    for (uint32_t i = 0; i < request_len; ++i) {
#pragma HLS PIPELINE II = 1
        response[i] = (uint8_t)(request[i] | 0xffu);
    }
    return request_len;
}
