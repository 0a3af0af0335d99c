// Proves include/mqlite.h works from C++17: it compiles with warnings as
// errors, links (extern "C" linkage), and a few calls behave.
#include "mqlite.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            std::fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",   \
                         __FILE__, __LINE__, #cond, mql_last_error());           \
            std::exit(1);                                                        \
        }                                                                        \
    } while (0)

namespace {

// A RAII owner, the way C++ code would wrap the handles.
struct Broker {
    mql_broker *raw = nullptr;
    explicit Broker(const std::string &dir) { CHECK(mql_open(dir.c_str(), nullptr, &raw) == MQL_OK); }
    ~Broker() { mql_close(raw); }
    Broker(const Broker &) = delete;
    Broker &operator=(const Broker &) = delete;
};

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    CHECK(std::string(mql_version()) == MQLITE_VERSION);
    CHECK(std::strcmp(mql_status_str(MQL_LOCKED), "MQL_LOCKED") == 0);
    static_assert(MQL_OK == 0, "MQL_OK is 0");
    static_assert(MQL_MESSAGE_TOO_LARGE == 400, "codes are stable");
    static_assert(sizeof(mql_status) == sizeof(int), "a C enum");
    static_assert(MQL_PRODUCER_FENCED == 403, "codes are stable");
    static_assert(MQL_OFFSET_UNKNOWN == UINT64_MAX, "unknown offset");
    static_assert(MQL_COMMIT_FAILED == 500, "codes are stable");
    static_assert(MQL_INVALID_RECORD_STATE == 501, "codes are stable");
    static_assert(MQL_ACK_ACCEPT == 0 && MQL_ACK_RENEW == 3, "ack types are stable");

    Broker mq(std::string(argv[1]) + "/data");
    mql_topic_config *tc = nullptr;
    CHECK(mql_topic_config_new(2, &tc) == MQL_OK);
    CHECK(mql_topic_config_set_segment_bytes(tc, 1 << 20) == MQL_OK);
    CHECK(mql_topic_create(mq.raw, "cpp", tc) == MQL_OK);
    mql_topic_config_free(tc);

    mql_producer *p = nullptr;
    CHECK(mql_producer_new(mq.raw, nullptr, &p) == MQL_OK);
    mql_header h = {"lang", 4, "c++", 3};
    mql_record rec = MQL_RECORD_INIT;
    mql_processor_config pc = MQL_PROCESSOR_CONFIG_INIT;
    CHECK(pc.threads == 4 && pc.mode == MQL_PROCESSING_MODE_ORDERLY && pc.max_retries == -1);
    mql_share_consumer_config sc = MQL_SHARE_CONSUMER_CONFIG_INIT;
    CHECK(sc.client_id == nullptr && sc.lock_duration_ms == 30000 && sc.commit_acks == -1);
    CHECK(sc.auto_offset_reset == MQL_OFFSET_RESET_EARLIEST && sc.max_poll_records == 500);
    rec.topic = "cpp";
    rec.key = "k";
    rec.key_len = 1;
    rec.value = "v";
    rec.value_len = 1;
    rec.headers = &h;
    rec.header_count = 1;
    mql_metadata md{};
    CHECK(mql_send_record(p, &rec, &md) == MQL_OK);
    CHECK(md.offset == 0);
    CHECK(!md.duplicate);
    CHECK(!rec.has_sequence);
    // Asynchronously, with a captureless lambda as the callback.
    int delivered = 0;
    mql_delivery_callback cb = [](void *ud, const mql_metadata *m, mql_status st, const char *) {
        if (st == MQL_OK && m != nullptr && m->offset == 1) ++*static_cast<int *>(ud);
    };
    rec.partition = md.partition;  // the same partition: offset 1
    CHECK(mql_produce(p, &rec, cb, &delivered) == MQL_OK);
    CHECK(mql_producer_flush(p) == MQL_OK);
    CHECK(delivered == 1);
    mql_producer_free(p);

    mql_consumer *c = nullptr;
    CHECK(mql_consumer_new(mq.raw, "cpp-group", nullptr, &c) == MQL_OK);
    // A rebalance callback from a captureless lambda.
    size_t assigned = 0;
    mql_rebalance_callback rb = [](void *ud, mql_consumer *, mql_rebalance_event ev,
                                   const mql_topic_partition *, size_t n) {
        if (ev == MQL_REBALANCE_ASSIGN) *static_cast<size_t *>(ud) += n;
    };
    CHECK(mql_consumer_set_rebalance_callback(c, rb, &assigned) == MQL_OK);
    CHECK(mql_subscribe(c, "cpp") == MQL_OK);
    CHECK(assigned == 2);
    mql_message *m = nullptr;
    for (int i = 0; i < 2; i++) {  // the blocking send, then the asynchronous one
        CHECK(mql_poll(c, 1000, &m) == MQL_OK);
        CHECK(mql_message_offset(m) == static_cast<uint64_t>(i));
        size_t len = 0;
        auto v = static_cast<const char *>(mql_message_value(m, &len));
        CHECK(std::string(v, len) == "v");
        CHECK(mql_message_header_count(m) == 1);
        mql_message_free(m);
    }
    CHECK(mql_poll(c, 0, &m) == MQL_TIMEOUT);
    CHECK(mql_commit(c) == MQL_OK);
    uint64_t committed = 0;
    CHECK(mql_committed(c, "cpp", md.partition, &committed, nullptr, 0, nullptr) == MQL_OK);
    CHECK(committed == 2);
    mql_consumer_free(c);

    CHECK(mql_topic_create(mq.raw, "cpp", nullptr) == MQL_TOPIC_EXISTS);
    CHECK(mql_last_error_code() == MQL_TOPIC_EXISTS);
    std::puts("header_check_cpp: ok");
    return 0;
}
