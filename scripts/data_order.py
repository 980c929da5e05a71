#!/usr/bin/env python3
"""Reference implementation of hpctrain's training sample order (docs/DATA.md, "Sample order").

The order of epoch e for seed s is a Fisher-Yates shuffle of 0..N-1 driven by xoshiro256**,
seeded with four splitmix64 outputs starting from s XOR (e * 0xD1B54A32D192ED03) mod 2^64, with
Lemire's unbiased bounded integers. It mirrors src/data/sampler.cpp step by step, so any tool can
reproduce which samples a run trained on.

    python3 scripts/data_order.py N SEED EPOCH [COUNT]     # prints the first COUNT indices
"""
import sys

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
EPOCH_MIX = 0xD1B54A32D192ED03


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


def global_batches(num_samples, global_batch, seed, shuffle, steps, epoch=0, offset=0):
    """The next `steps` global batches from (epoch, offset), with drop_last."""
    out = []
    cached_epoch, order = None, None
    for _ in range(steps):
        if offset + global_batch > num_samples:
            epoch, offset = epoch + 1, 0
        if cached_epoch != epoch:
            order = epoch_permutation(num_samples, seed, epoch) if shuffle else list(range(num_samples))
            cached_epoch = epoch
        out.append(order[offset:offset + global_batch])
        offset += global_batch
    return out


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    n, seed, epoch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    count = int(sys.argv[4]) if len(sys.argv) > 4 else n
    print(" ".join(str(i) for i in epoch_permutation(n, seed, epoch)[:count]))
