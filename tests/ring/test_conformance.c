/* The transport conformance suite over one transport of the table (conformance.h): every case,
 * or the ones named.
 *
 * usage: test_conformance TRANSPORT [CASE...]
 * Exit 0; 1 after a FAIL line; 77 (with the reason) where the transport cannot run here. */
#include <string.h>

#include "check.h"
#include "clock.h"
#include "conformance.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_conformance TRANSPORT [CASE...]; cases:\n");
        for (int i = 0; i < conf_ncases; i++) fprintf(stderr, "  %-9s %s\n", conf_cases[i].name, conf_cases[i].about);
        return 2;
    }
    conf_transport X;
    int rc = conf_open(&X, argv[1]);
    if (rc != 0) return rc;
    int n = argc > 2 ? argc - 2 : conf_ncases;
    for (int i = 0; i < n; i++) {
        const conf_case *c = argc > 2 ? conf_find_case(argv[2 + i]) : &conf_cases[i];
        CHECK(c, "no case %s", argv[2 + i]);
        double t0 = wp_now();
        c->run(&X);
        printf("ok: %s over %s (%.2f s)\n", c->name, X.name, wp_now() - t0);
    }
    conf_close(&X);
    return 0;
}
