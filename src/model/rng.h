/* A small counter-free generator (splitmix64 steps) for random tokens, directions and test
 * data: reproducible from a seed on every platform, no global state. */
#ifndef WP_RNG_H
#define WP_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} wp_rng;

static inline uint64_t rng_next(wp_rng *g) {
    uint64_t x = (g->state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline wp_rng rng_seeded(uint64_t seed) {
    wp_rng g = {seed};
    rng_next(&g); /* decorrelate nearby seeds */
    return g;
}

/* uniform in [0, 1) with 53 random bits */
static inline double rng_uniform(wp_rng *g) { return (double)(rng_next(g) >> 11) * 0x1.0p-53; }

/* uniform in [0, n); the modulo bias is below n / 2^64 */
static inline uint64_t rng_below(wp_rng *g, uint64_t n) { return rng_next(g) % n; }

/* standard normal (Box-Muller, one of the pair) */
static inline double rng_normal(wp_rng *g) {
    double u1 = rng_uniform(g), u2 = rng_uniform(g);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

#endif
