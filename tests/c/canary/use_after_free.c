/* canary: valgrind asan
 *
 * A deliberate use after free: the topic string of a message, read after
 * mql_message_free released it (the header says every pointer an accessor
 * returned dies with the message). The pass must report it. Not a test of
 * the library. */
#include "check.h"

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 1);
    fill(mq, "t", 1, 1);
    mql_message *m = read_at(mq, "t", 0, 0);
    const char *topic = mql_message_topic(m);
    CHECK(strcmp(topic, "t") == 0);
    mql_message_free(m);
    volatile char first = topic[0];
    printf("canary use_after_free: read %d\n", (int)first);
    CHECK_OK(mql_close(mq));
    return 0;
}
