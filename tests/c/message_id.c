/* Message ids: mql_message_id (snprintf-like copy), mql_message_id_parse
 * (round trip, malformed ids, a topic buffer too small) and
 * mql_seek_to_id (to the message; an unassigned partition fails as
 * mql_seek does). */
#include "check.h"

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "ord.e-r_s", 2);
    make_topic(mq, "other", 1);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    for (int i = 0; i < 4; i++) send_to(p, "ord.e-r_s", 1, i % 2 ? "odd" : "even");
    mql_producer_free(p);

    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "ord.e-r_s", 1));
    mql_message *m = NULL;
    CHECK_OK(mql_poll(c, 1000, &m));
    mql_message_free(m);
    CHECK_OK(mql_poll(c, 1000, &m));
    char buf[MQL_MESSAGE_ID_MAX + 1];
    uint64_t off = mql_message_offset(m);
    CHECK(off == 1);
    size_t n = mql_message_id(m, buf, sizeof buf);
    CHECK(n == strlen("ord.e-r_s:1:1") && strcmp(buf, "ord.e-r_s:1:1") == 0);
    CHECK(mql_message_id(m, NULL, 0) == n); /* the length only */
    char small[6];
    memset(small, '#', sizeof small);
    CHECK(mql_message_id(m, small, sizeof small) == n);
    CHECK(strcmp(small, "ord.e") == 0); /* cut short, terminated */
    CHECK(mql_message_id(NULL, buf, sizeof buf) == 0);

    /* Parse it back. */
    char topic[250];
    uint32_t part = 9;
    uint64_t offset = 9;
    CHECK_OK(mql_message_id_parse(buf, topic, sizeof topic, &part, &offset));
    CHECK(strcmp(topic, "ord.e-r_s") == 0 && part == 1 && offset == 1);
    const char *bad[] = {"", "t", "t:1", "t:1:2:3", "t:x:1", "t:01:1", "t:1:-1", "a b:1:1", ":1:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        part = 9;
        CHECK_FAIL(mql_message_id_parse(bad[i], topic, sizeof topic, &part, &offset), MQL_INVALID_ARGUMENT,
                   "message id");
        CHECK(part == 9); /* nothing written */
    }
    char tiny[4];
    CHECK_FAIL(mql_message_id_parse("ord.e-r_s:1:1", tiny, sizeof tiny, &part, &offset), MQL_INVALID_ARGUMENT,
               "topic buffer");

    /* Seek to an id: message 3 next, then back to 0. */
    CHECK_OK(mql_seek_to_id(c, "ord.e-r_s:1:3"));
    mql_message_free(m);
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 3 && value_is(m, "odd"));
    CHECK_OK(mql_seek_to_id(c, "ord.e-r_s:1:0"));
    mql_message_free(m);
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 0 && value_is(m, "even"));
    mql_message_free(m);
    CHECK_FAIL(mql_seek_to_id(c, "ord.e-r_s:1:x"), MQL_INVALID_ARGUMENT, "message id");
    CHECK_FAIL(mql_seek_to_id(c, "other:0:0"), MQL_INVALID_ARGUMENT, "not assigned");
    CHECK_FAIL(mql_seek(c, "other", 0, 0), MQL_INVALID_ARGUMENT, "not assigned");
    CHECK_FAIL(mql_seek_to_id(c, "ord.e-r_s:1:99"), MQL_OFFSET_OUT_OF_RANGE, "");
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    return 0;
}
