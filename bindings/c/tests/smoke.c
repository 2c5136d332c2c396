/*
 * The C ABI from plain C: a fixed generator, decode, a typed error, close,
 * public IDs. scripts/go-binding compiles it against include/idmint.h and
 * the static library, and runs it.
 *
 *   cc -std=c11 -Wall -Wextra -Werror -Ibindings/c/include bindings/c/tests/smoke.c \
 *      target/debug/libidmint_ffi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -o smoke
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idmint.h"

static int failures = 0;

#define CHECK(cond)                                                      \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                  \
        }                                                                \
    } while (0)

/* Succeeds or prints the error, frees it, and counts a failure. */
static int ok(IdmintError *e, const char *what) {
    if (e == NULL) {
        return 1;
    }
    fprintf(stderr, "%s: %s: %s\n", what, idmint_error_code(e), idmint_error_message(e));
    idmint_error_free(e);
    failures++;
    return 0;
}

/* Whether e is an error with `code`; frees it. */
static int fails_with(IdmintError *e, const char *code) {
    if (e == NULL) {
        fprintf(stderr, "expected %s, got success\n", code);
        return 0;
    }
    int same = strcmp(idmint_error_code(e), code) == 0;
    if (!same) {
        fprintf(stderr, "expected %s, got %s: %s\n", code, idmint_error_code(e), idmint_error_message(e));
    }
    idmint_error_free(e);
    return same;
}

int main(void) {
    IdmintGeneratorOptions options = {0};
    options.layout = "twitter";
    options.worker = 7;
    IdmintGenerator *g = NULL;
    if (!ok(idmint_generator_new(&options, &g), "idmint_generator_new")) {
        return 1;
    }

    uint64_t first = 0;
    CHECK(ok(idmint_generator_next_id(g, &first), "next_id"));
    uint64_t batch[1000];
    CHECK(ok(idmint_generator_next_ids(g, 1000, batch), "next_ids"));
    CHECK(first < batch[0]);
    for (int i = 1; i < 1000; i++) {
        CHECK(batch[i - 1] < batch[i]);
    }
    IdmintIdResult next = idmint_generator_next(g); /* by value */
    CHECK(ok(next.error, "next") && next.id > batch[999]);

    IdmintLayout *twitter = NULL;
    CHECK(ok(idmint_layout_parse("twitter", &twitter), "layout_parse"));
    IdmintDecoded d;
    CHECK(ok(idmint_layout_decode(twitter, first, &d), "decode"));
    CHECK(d.worker == 7 && d.id == first && d.time.seconds > 1700000000);
    IdmintLayoutInfo info;
    CHECK(ok(idmint_layout_info(twitter, &info), "layout_info"));
    CHECK(strcmp(info.preset, "twitter") == 0 && info.workers == 1024);

    CHECK(fails_with(idmint_generator_next_ids(g, 0, NULL), "invalid_count"));
    CHECK(fails_with(idmint_generator_next_ids(g, -1, NULL), "invalid_count"));
    CHECK(fails_with(idmint_generator_check_count(-1), "invalid_count"));
    CHECK(idmint_generator_check_count(5) == NULL);
    CHECK(fails_with(idmint_layout_decode(twitter, (uint64_t)1 << 63, &d), "invalid_id"));
    IdmintLayout *bad = NULL;
    CHECK(fails_with(idmint_layout_parse("twitter,sequence=twelve", &bad), "invalid_layout_text"));
    CHECK(bad == NULL);

    idmint_generator_close(g);
    idmint_generator_close(g); /* twice: harmless */
    uint64_t after = 0;
    CHECK(fails_with(idmint_generator_next_id(g, &after), "closed"));
    CHECK(after == 0);
    next = idmint_generator_next(g);
    CHECK(fails_with(next.error, "closed") && next.id == 0);
    idmint_generator_free(g);

    IdmintPublicIds *p = NULL;
    IdmintPublicIdsOptions popts = idmint_public_ids_options_default();
    CHECK(popts.bits == 63 && strcmp(popts.format, "dec") == 0);
    popts.key = "000102030405060708090a0b0c0d0e0f";
    popts.bits = 300;
    CHECK(fails_with(idmint_public_ids_new(&popts, &p), "invalid_config") && p == NULL);
    popts.bits = 63;
    popts.format = "base32";
    CHECK(ok(idmint_public_ids_new(&popts, &p), "public_ids_new"));
    uint64_t pub = 0, back = 0;
    CHECK(ok(idmint_public_ids_obfuscate(p, first, &pub), "obfuscate"));
    char *text = NULL;
    CHECK(ok(idmint_public_ids_encode(p, pub, &text), "encode"));
    uint64_t read = 0;
    CHECK(ok(idmint_public_ids_decode(p, text, &read), "decode text"));
    CHECK(ok(idmint_public_ids_reveal(p, read, &back), "reveal"));
    CHECK(back == first && pub != first);
    idmint_string_free(text);
    idmint_public_ids_free(p);
    idmint_layout_free(twitter);

    if (failures == 0) {
        printf("C ABI smoke test: ok (first ID %llu)\n", (unsigned long long)first);
    }
    return failures == 0 ? 0 : 1;
}
