#!/usr/bin/env python3
"""Reference implementation of hpctrain's training sample order (docs/DATA.md, "Sample order").

Up to 2^23 samples the order of epoch e for seed s is a Fisher-Yates shuffle of 0..N-1 driven
by xoshiro256**, seeded with four splitmix64 outputs starting from s XOR (e * 0xD1B54A32D192ED03)
mod 2^64, with Lemire's unbiased bounded integers ("held"). Above 2^23 it is a keyed Feistel
permutation computed per index ("keyed"). A weighted mixture blends its sources in Megatron-LM's
greedy order, each source with its own epochs. It mirrors src/data/sampler.cpp step by step, so
any tool can reproduce which samples a run trained on.

    python3 scripts/data_order.py N SEED EPOCH [COUNT]           # the first COUNT indices
    python3 scripts/data_order.py --keyed N SEED EPOCH [COUNT]   # the keyed order at any N
    python3 scripts/data_order.py --mixture N1:W1,N2:W2 SEED COUNT [START]
        # global indices (sources concatenated) of blend positions START..START+COUNT-1
"""
import sys

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
EPOCH_MIX = 0xD1B54A32D192ED03
KEYED_MIX = 0x8CB92BA72F3D8DD7
SOURCE_MIX = 0xA0761D6478BD642F
HELD_ORDER_MAX_SAMPLES = 1 << 23
KEYED_ROUNDS = 6


def splitmix64(state):
    """Returns (new state, output)."""
    state = (state + GOLDEN) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Xoshiro256StarStar:
    def __init__(self, seed):
        self.s = []
        state = seed & MASK
        for _ in range(4):
            state, word = splitmix64(state)
            self.s.append(word)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        """Uniform integer in [0, n), Lemire's multiply-shift with rejection."""
        m = self.next() * n
        low = m & MASK
        if low < n:
            threshold = ((1 << 64) - n) % n
            while low < threshold:
                m = self.next() * n
                low = m & MASK
        return m >> 64


def epoch_permutation(num_samples, seed, epoch):
    order = list(range(num_samples))
    rng = Xoshiro256StarStar((seed ^ ((epoch * EPOCH_MIX) & MASK)) & MASK)
    for i in range(num_samples - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class KeyedPermutation:
    """Balanced Feistel network on the smallest even bit count holding n, with cycle walking."""

    def __init__(self, num_samples, seed, epoch):
        self.n = max(num_samples, 1)
        bits = 2
        while bits < 64 and (1 << bits) < self.n:
            bits += 2
        self.half = bits // 2
        self.mask = (1 << self.half) - 1
        state = (seed ^ ((epoch * EPOCH_MIX) & MASK) ^ KEYED_MIX) & MASK
        self.keys = []
        for _ in range(KEYED_ROUNDS):
            state, key = splitmix64(state)
            self.keys.append(key)

    def __call__(self, position):
        x = position
        while True:
            left, right = x >> self.half, x & self.mask
            for key in self.keys:
                left, right = right, left ^ (mix64(right ^ key) & self.mask)
            x = (left << self.half) | right
            if x < self.n:
                return x


def default_keyed(num_samples):
    return num_samples > HELD_ORDER_MAX_SAMPLES


def order_at(num_samples, seed, epoch, position, shuffle=True, keyed=None, cache=None):
    """Sample at `position` of the epoch's order (held orders cached in `cache`, a dict)."""
    if not shuffle:
        return position
    if keyed is None:
        keyed = default_keyed(num_samples)
    if keyed:
        return KeyedPermutation(num_samples, seed, epoch)(position)
    if cache is None:
        cache = {}
    if cache.get("epoch") != epoch:
        cache["epoch"], cache["order"] = epoch, epoch_permutation(num_samples, seed, epoch)
    return cache["order"][position]


def source_seed(seed, source):
    return (seed ^ (((source + 1) * SOURCE_MIX) & MASK)) & MASK


def weight_units(weights):
    """Weights in units of 2^-32, as src/data/sampler.cpp rounds them (floor(x + 0.5))."""
    import math
    total = 0.0
    for w in weights:
        total += w
    return [int(math.floor(w / total * 4294967296.0 + 0.5)) for w in weights]


def mixture_stream(counts, weights, seed, count, start=0, shuffle=True, keyed=None):
    """Global indices of blend positions start..start+count-1 (sources concatenated in order)."""
    units = weight_units(weights)
    consumed = [0] * len(counts)
    begins = [sum(counts[:i]) for i in range(len(counts))]
    caches = [{} for _ in counts]
    out = []
    for p in range(start + count):
        best, best_lag = 0, None
        for i, u in enumerate(units):
            lag = u * (p + 1) - (consumed[i] << 32)
            if best_lag is None or lag > best_lag:
                best, best_lag = i, lag
        draw = consumed[best]
        consumed[best] += 1
        if p >= start:
            n = counts[best]
            k = keyed if keyed is not None else default_keyed(n)
            out.append(begins[best] + order_at(n, source_seed(seed, best), draw // n, draw % n,
                                               shuffle, k, caches[best]))
    return out


def global_batches(num_samples, global_batch, seed, shuffle, steps, epoch=0, offset=0):
    """The next `steps` global batches from (epoch, offset), with drop_last."""
    out = []
    cached_epoch, order = None, None
    for _ in range(steps):
        if offset + global_batch > num_samples:
            epoch, offset = epoch + 1, 0
        if default_keyed(num_samples) and shuffle:
            perm = KeyedPermutation(num_samples, seed, epoch)
            out.append([perm(offset + k) for k in range(global_batch)])
        else:
            if cached_epoch != epoch:
                order = epoch_permutation(num_samples, seed, epoch) if shuffle else list(range(num_samples))
                cached_epoch = epoch
            out.append(order[offset:offset + global_batch])
        offset += global_batch
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--mixture"]:
        if len(args) < 4:
            sys.exit(__doc__)
        pairs = [item.split(":") for item in args[1].split(",")]
        start = int(args[4]) if len(args) > 4 else 0
        stream = mixture_stream([int(n) for n, _ in pairs], [float(w) for _, w in pairs],
                                int(args[2]), int(args[3]), start)
        print(" ".join(str(i) for i in stream))
        sys.exit(0)
    keyed = args[:1] == ["--keyed"]
    if keyed:
        args = args[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    n, seed, epoch = int(args[0]), int(args[1]), int(args[2])
    count = int(args[3]) if len(args) > 3 else n
    if keyed or default_keyed(n):
        perm = KeyedPermutation(n, seed, epoch)
        print(" ".join(str(perm(i)) for i in range(min(count, n))))
    else:
        print(" ".join(str(i) for i in epoch_permutation(n, seed, epoch)[:count]))
