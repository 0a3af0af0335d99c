/* canary: valgrind asan
 *
 * A deliberate leak of a library object (an mql_config, allocated by the
 * Rust library): the pass must report it, or it would not report a leaked
 * handle in a real test either. Not a test of the library. */
#include "check.h"

/* Makes a config and drops the only pointer to it. */
static __attribute__((noinline)) void lose_config(void) {
    mql_config *cfg = NULL;
    CHECK_OK(mql_config_new(&cfg));
    CHECK(cfg != NULL);
}

/* Overwrites the stack the pointer may linger on. */
static __attribute__((noinline)) void clobber_stack(void) {
    volatile char junk[16384];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = 0;
}

int main(int argc, char **argv) {
    (void)scratch_dir(argc, argv);
    lose_config();
    clobber_stack();
    puts("canary leak: ran");
    return 0;
}
