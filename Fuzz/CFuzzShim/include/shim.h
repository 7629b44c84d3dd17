#ifndef PROPERTYLIST_FUZZ_SHIM_H
#define PROPERTYLIST_FUZZ_SHIM_H

#include <stddef.h>
#include <stdint.h>

/// libFuzzer's entry point for programs that own `main` (provided by
/// libclang_rt.fuzzer_no_main; only linked by Fuzz/run.sh).
int LLVMFuzzerRunDriver(int *argc, char ***argv,
                        int (*UserCb)(const uint8_t *Data, size_t Size));

#endif
