/* canary: asan
 *
 * Deliberate undefined behaviour in C (a signed overflow on a status
 * value): the sanitizer pass must stop on it (UBSan with halt_on_error).
 * Valgrind does not look for this kind of error, hence "asan" only. Not a
 * test of the library. */
#include <limits.h>

#include "check.h"

int main(int argc, char **argv) {
    (void)scratch_dir(argc, argv);
    volatile int code = INT_MAX;
    int next = code + 1;
    printf("canary undefined: %s\n", mql_status_str(next));
    return 0;
}
