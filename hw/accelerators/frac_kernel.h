// The C ABI every emulated fRAC accelerator exports (kernel plugin ABI, version 1).
//
// An accelerator is written as HLS-style C++ and compiled by the build chain
// with the system C++ compiler into a shared object (the "kernel plugin"),
// the way HLS C-simulation runs the same source on a CPU. The emulated device
// loads the plugin named by a partial bitstream and calls it once per request.
//
// Contract of frac_kernel_run:
//   * request/request_len: the whole request as the slot sees it
//     (docs/frac.md §2.4): the 64-byte header line first, then the data
//     lines. request_len is a multiple of 64, at least 64, at most 65472.
//   * top_config: bytes 60-61 of the header (also readable from the request);
//     passed separately because top_k uses it as its result mask.
//   * response/response_cap: where to write the answer; the device sizes the
//     buffer to the unit's response length from the table of docs/frac.md §2.5.
//   * returns the number of response bytes written (>= 0), or a negative
//     FRAC_KERNEL_E* code. The function must not throw, keep no state between
//     calls and be safe to call from several threads at once: the emulator
//     runs requests of different connections concurrently.
#ifndef FRAC_KERNEL_H
#define FRAC_KERNEL_H

#include <stdint.h>

#define FRAC_KERNEL_ABI_VERSION 1

// The request is not a whole number of 64-byte lines (or empty).
#define FRAC_KERNEL_EREQUEST (-1)
// response_cap is smaller than the answer.
#define FRAC_KERNEL_ECAP (-2)
// The unit gives no answer to this request (norm with more than 256 data
// lines: the real slot never finishes it).
#define FRAC_KERNEL_ENOANSWER (-3)
// The unit could not get the working memory it needs.
#define FRAC_KERNEL_ENOMEM (-4)

#define FRAC_LINE 64
#define FRAC_PREFIX_LEN 56

#if defined(__GNUC__)
#define FRAC_EXPORT __attribute__((visibility("default")))
#else
#define FRAC_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

// FRAC_KERNEL_ABI_VERSION; the loader refuses a plugin with another value.
FRAC_EXPORT int32_t frac_kernel_abi_version(void);

// The unit's name as in hw/accelerators/<name>/unit.yaml (NUL-terminated,
// static storage); the loader checks it against the design manifest.
FRAC_EXPORT const char* frac_kernel_name(void);

// Runs the unit on one complete request; see the contract above.
FRAC_EXPORT int64_t frac_kernel_run(const uint8_t* request, uint32_t request_len,
                                    uint16_t top_config, uint8_t* response,
                                    uint32_t response_cap);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
namespace frac {

// Whether the first line of a request is "the header line" as the slot
// modules recognise it: bits 447:0 (bytes 0..55) all ones (docs/frac.md §2.2).
// Units that consume the header skip it only then; otherwise it is data.
static inline bool is_header_line(const uint8_t* line) {
    for (int i = 0; i < FRAC_PREFIX_LEN; ++i) {
        if (line[i] != 0xff) return false;
    }
    return true;
}

// Little-endian loads and stores, independent of the host's byte order.
static inline uint32_t load_u32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline void store_u32(uint8_t* p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint16_t load_u16(const uint8_t* p) {
    return (uint16_t)((uint16_t)p[0] | ((uint16_t)p[1] << 8));
}

static inline void store_u16(uint8_t* p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

// Checks the common request preconditions; returns 0 or a negative code.
static inline int64_t check_request(const uint8_t* request, uint32_t request_len) {
    if (request == nullptr || request_len < FRAC_LINE || request_len % FRAC_LINE != 0) {
        return FRAC_KERNEL_EREQUEST;
    }
    return 0;
}

}  // namespace frac
#endif

#endif  // FRAC_KERNEL_H
