// top_k: the 16 largest u32 words of a request, largest first (docs/frac.md
// §2.5, §5).
//
// Request: header line + N lines of 16 x u32 LE. Answer: one 64-byte line
// holding the 16 largest data words by unsigned compare, in descending order;
// word j is zeroed where bit j of the header's top config is clear (the flags
// FIRST/LAST alias mask bits 0 and 1, so a header sent without LAST loses
// word 1). Fewer than 16 data words leave zeros at the end.
//
// HLS shape: a 16-entry sorted register file updated by one compare-and-shift
// insertion per word (fully partitioned and unrolled in hardware, one word
// per cycle); the C++ below is that loop nest as C-simulation runs it.
#include "frac_kernel.h"

namespace {

const int K = 16;

// Inserts v into best[0..K) (descending); the smallest entry falls off.
inline void insert_word(uint32_t best[K], uint32_t v) {
#pragma HLS INLINE
    if (v <= best[K - 1]) return;
    int i = K - 1;
    // Shift smaller entries down one place; unrolled into K comparators.
    while (i > 0 && best[i - 1] < v) {
#pragma HLS UNROLL
        best[i] = best[i - 1];
        --i;
    }
    best[i] = v;
}

}  // namespace

extern "C" int32_t frac_kernel_abi_version(void) { return FRAC_KERNEL_ABI_VERSION; }

extern "C" const char* frac_kernel_name(void) { return "top_k"; }

extern "C" int64_t frac_kernel_run(const uint8_t* request, uint32_t request_len,
                                   uint16_t top_config, uint8_t* response,
                                   uint32_t response_cap) {
#pragma HLS INTERFACE axis port = request
#pragma HLS INTERFACE axis port = response
    const int64_t bad = frac::check_request(request, request_len);
    if (bad != 0) return bad;
    if (response == nullptr || response_cap < FRAC_LINE) return FRAC_KERNEL_ECAP;

    // Zeros stand for "no value yet": a zero data word never displaces one,
    // and with fewer than 16 words the tail stays zero as the unit answers.
    uint32_t best[K] = {0};
#pragma HLS ARRAY_PARTITION variable = best complete
    const uint32_t first = frac::is_header_line(request) ? FRAC_LINE : 0;
    for (uint32_t off = first; off < request_len; off += 4) {
#pragma HLS PIPELINE II = 1
        insert_word(best, frac::load_u32(request + off));
    }
    for (int j = 0; j < K; ++j) {
#pragma HLS UNROLL
        const uint32_t word = ((top_config >> j) & 1u) ? best[j] : 0u;
        frac::store_u32(response + 4 * j, word);
    }
    return FRAC_LINE;
}
