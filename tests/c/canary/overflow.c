/* canary: valgrind asan
 *
 * A deliberate read one byte past the end of memory the library handed out
 * (the text of mql_last_error(), a heap string the Rust library allocated
 * exactly to size): the pass must report it. Not a test of the library. */
#include "check.h"

int main(int argc, char **argv) {
    (void)scratch_dir(argc, argv);
    CHECK_STATUS(mql_config_new(NULL), MQL_NULL_ARGUMENT);
    const char *text = mql_last_error();
    size_t len = strlen(text);
    CHECK(len > 0);
    volatile char past = text[len + 1]; /* the NUL is text[len] */
    printf("canary overflow: read %d\n", (int)past);
    return 0;
}
