/* The graceful-stop helper: a SIGTERM or SIGINT is recorded (not fatal) once; the handler is
 * one-shot, so the process keeps the default action for a second signal of that kind. */
#include <signal.h>

#include "stop.h"
#include "tu.h"

int main(void) {
    char err[256];
    EXPECT(stop_install(err, sizeof err) == 0, "install: %s", err);
    EXPECT(stop_requested() == 0, "a stop is requested before any signal");
    const int sigs[] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        raise(sigs[i]);
        EXPECT(stop_requested() == sigs[i], "after %s: stop_requested() = %d", strsignal(sigs[i]), stop_requested());
        struct sigaction now;
        sigaction(sigs[i], NULL, &now);
        EXPECT(now.sa_handler == SIG_DFL, "%s: the handler is not one-shot", strsignal(sigs[i]));
        stop_clear();
        EXPECT(stop_requested() == 0, "stop_clear did not clear");
    }
    return check_result("train/stop");
}
