/* The version three ways agree: the string the library reports
 * (mql_version(), the crate version), the integer it reports
 * (mql_version_number()) and the header's MQLITE_VERSION_NUMBER, which is
 * major * 1000000 + minor * 1000 + patch. */
#include "check.h"

#if !defined(MQLITE_VERSION_NUMBER) || MQLITE_VERSION_NUMBER < 1000
#error "MQLITE_VERSION_NUMBER must be usable in #if and at least 0.1.0 (1000)"
#endif

int main(int argc, char **argv) {
    (void)scratch_dir(argc, argv);

    int major = -1, minor = -1, patch = -1;
    char rest = 0;
    /* Exactly three decimal parts: a fourth character after the patch fails. */
    CHECK(sscanf(mql_version(), "%d.%d.%d%c", &major, &minor, &patch, &rest) == 3);
    CHECK(major >= 0 && minor >= 0 && minor < 1000 && patch >= 0 && patch < 1000);
    int32_t from_string = major * 1000000 + minor * 1000 + patch;

    CHECK(mql_version_number() == from_string);
    CHECK(MQLITE_VERSION_NUMBER == from_string);
    CHECK(MQLITE_VERSION_NUMBER ==
          MQLITE_VERSION_MAJOR * 1000000 + MQLITE_VERSION_MINOR * 1000 + MQLITE_VERSION_PATCH);
    CHECK(strcmp(mql_version(), MQLITE_VERSION) == 0);
    printf("mqlite %s = %d\n", mql_version(), (int)mql_version_number());
    return 0;
}
