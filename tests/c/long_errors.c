/* Texts longer than any fixed buffer: error texts quote what they are about
 * (a 1 MiB topic name, a path longer than PATH_MAX), so they have no limit.
 * mql_last_error() returns all of it; mql_last_error_copy() copies into a
 * buffer of any size like snprintf (cut short, NUL-terminated, never a
 * byte past the buffer, never half a UTF-8 character) and returns the full
 * length. The other text out-parameters (committed metadata, member ids)
 * cut short the same way and report the full length. */
#include "check.h"

/* Whether the n bytes at s are valid UTF-8 (lead and continuation bytes
 * only: truncation is what is in question). */
static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char lead = s[i];
        size_t more;
        if (lead < 0x80)
            more = 0;
        else if ((lead & 0xE0) == 0xC0)
            more = 1;
        else if ((lead & 0xF0) == 0xE0)
            more = 2;
        else if ((lead & 0xF8) == 0xF0)
            more = 3;
        else
            return 0;
        if (more > n - i - 1) return 0;
        for (size_t k = 1; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += more + 1;
    }
    return 1;
}

/* A buffer of `len` bytes followed by 8 guard bytes, all '#'. */
static char *guarded(size_t len) {
    char *b = malloc(len + 8);
    CHECK(b != NULL);
    memset(b, '#', len + 8);
    return b;
}

static void guards_intact(const char *b, size_t len) {
    for (size_t i = len; i < len + 8; i++)
        if (b[i] != '#') FAIL_AT("byte %zu, past the %zu-byte buffer, was written", i, len);
}

/* Checks mql_last_error_copy() against mql_last_error() for every buffer
 * length from 0 to the whole text plus one, sampled with `step`. */
static void check_copies(size_t step) {
    const char *text = mql_last_error();
    size_t len = strlen(text);
    mql_status code = mql_last_error_code();
    CHECK(mql_last_error_copy(NULL, 0) == len);
    CHECK(mql_last_error_copy(NULL, 4096) == len); /* NULL: the length only */
    for (size_t buf_len = 0; buf_len <= len + 1; buf_len += (buf_len < 80 || buf_len + 80 > len) ? 1 : step) {
        char *b = guarded(buf_len);
        CHECK(mql_last_error_copy(b, buf_len) == len);
        guards_intact(b, buf_len);
        if (buf_len == 0) {
            CHECK(b[0] == '#'); /* nothing written, not even a NUL */
        } else {
            size_t got = strlen(b);
            CHECK(got <= buf_len - 1);
            CHECK(got + 4 > buf_len - 1 || got == len); /* at most one character (< 4 bytes) left out */
            CHECK(memcmp(b, text, got) == 0);
            CHECK(valid_utf8((const unsigned char *)b, got));
            if (buf_len > len) CHECK(got == len);
        }
        free(b);
    }
    /* Reading it changed nothing. */
    CHECK(mql_last_error_code() == code);
    CHECK(mql_last_error() == text);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    /* Commit metadata is bounded (4 KiB by default): room for the 100,000
     * bytes committed below, and a commit over the bound refused. */
    char data[4096];
    join_path(data, sizeof data, dir, "data");
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    CHECK_OK(mql_config_set_max_commit_metadata_bytes(cfg, 100000));
    mql_broker *mq;
    CHECK_OK(mql_open(data, cfg, &mq));
    mql_config_free(cfg);
    make_topic(mq, "t", 1);
    fill(mq, "t", 1, 1);

    /* --- a 1 MiB topic name: the text quotes all of it --- */
    size_t huge = (size_t)1 << 20;
    char *name = malloc(huge + 1);
    CHECK(name != NULL);
    memset(name, 'n', huge);
    name[huge] = '\0';
    CHECK_FAIL(mql_topic_create(mq, name, NULL), MQL_INVALID_TOPIC_NAME, "invalid topic name");
    CHECK(strlen(mql_last_error()) > huge);
    check_copies(65537);
    /* Exactly the text's length: cut by one byte; one more: all of it. */
    size_t len = strlen(mql_last_error());
    char *b = guarded(len + 1);
    CHECK(mql_last_error_copy(b, len) == len);
    CHECK(b[len - 1] == '\0' && memcmp(b, mql_last_error(), len - 1) == 0 && b[len] == '#');
    CHECK(mql_last_error_copy(b, len + 1) == len);
    CHECK(strcmp(b, mql_last_error()) == 0);
    guards_intact(b, len + 1);
    free(b);
    /* The same name elsewhere. */
    CHECK_FAIL(mql_topic_delete(mq, name), MQL_UNKNOWN_TOPIC, "unknown topic");
    CHECK(strlen(mql_last_error()) > huge);
    check_copies(65537);
    free(name);

    /* --- multi-byte characters: no cut splits one --- */
    char accents[2 * 300 + 4 * 10 + 1] = "";
    for (int i = 0; i < 300; i++) strcat(accents, "\xc3\xa9");        /* é, 2 bytes */
    for (int i = 0; i < 10; i++) strcat(accents, "\xf0\x9f\x93\xa8"); /* a 4-byte emoji */
    CHECK_FAIL(mql_topic_create(mq, accents, NULL), MQL_INVALID_TOPIC_NAME, "\xc3\xa9");
    check_copies(1);

    /* --- a path longer than PATH_MAX --- */
    size_t path_len = 6000;
    char *path = malloc(path_len + 1);
    CHECK(path != NULL);
    int n = snprintf(path, path_len + 1, "%s/", dir);
    CHECK(n > 0 && (size_t)n < path_len);
    memset(path + n, 'p', path_len - (size_t)n);
    path[path_len] = '\0';
    mql_broker *other = NULL;
    CHECK_FAIL(mql_open(path, NULL, &other), MQL_IO, "ppppppppppppppppppppppppppppppppppppp");
    CHECK(other == NULL);
    CHECK(strlen(mql_last_error()) > path_len - (size_t)n);
    check_copies(97);
    free(path);

    /* --- committed metadata of 100,000 bytes --- */
    size_t meta_len = 100000;
    char *meta = malloc(meta_len + 1);
    CHECK(meta != NULL);
    for (size_t i = 0; i < meta_len; i++) meta[i] = (char)('a' + i % 26);
    meta[meta_len] = '\0';
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    mql_committed_offset co = {"t", 0, 1, meta, 0};
    CHECK_OK(mql_commit_offsets(c, &co, 1)); /* exactly the bound */
    char *over = malloc(meta_len + 2);
    CHECK(over != NULL);
    memcpy(over, meta, meta_len);
    over[meta_len] = 'z';
    over[meta_len + 1] = '\0';
    mql_committed_offset too_long = {"t", 0, 0, over, 0};
    CHECK_FAIL(mql_commit_offsets(c, &too_long, 1), MQL_INVALID_ARGUMENT, "100001 bytes");
    free(over);
    uint64_t off = 0;
    size_t full = 0;
    CHECK_OK(mql_committed(c, "t", 0, &off, NULL, 0, &full)); /* the length only */
    CHECK(off == 1 && full == meta_len);
    size_t sizes[] = {1, 2, 16, 4096, meta_len, meta_len + 1, meta_len + 100};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i];
        b = guarded(size);
        full = 0;
        CHECK_OK(mql_committed(c, "t", 0, &off, b, size, &full));
        CHECK(full == meta_len);
        size_t kept = size - 1 < meta_len ? size - 1 : meta_len;
        CHECK(strlen(b) == kept && memcmp(b, meta, kept) == 0);
        guards_intact(b, size);
        free(b);
    }
    free(meta);

    /* --- a member id longer than 249 bytes --- */
    char client[250];
    memset(client, 'c', 249);
    client[249] = '\0';
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_client_id(cc, client));
    mql_consumer *member;
    CHECK_OK(mql_consumer_new(mq, "members", cc, &member));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(member, "t"));
    size_t id_len = 0;
    CHECK_OK(mql_consumer_member_id(member, NULL, 0, &id_len));
    CHECK(id_len > 249); /* "<client id>-<number>" */
    b = guarded(8);
    CHECK_OK(mql_consumer_member_id(member, b, 8, &id_len));
    CHECK(strcmp(b, "ccccccc") == 0);
    guards_intact(b, 8);
    free(b);
    b = guarded(id_len + 1);
    CHECK_OK(mql_consumer_member_id(member, b, id_len + 1, NULL));
    CHECK(strlen(b) == id_len && strncmp(b, client, 249) == 0 && b[249] == '-');
    free(b);

    mql_consumer_free(member);
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    puts("long_errors: ok");
    return 0;
}
