#!/usr/bin/env python3
"""Writes configs/data/bigrams.csv: a made-up sequence task for the sequence layers (docs/model-spec.md).

Each row is 24 token ids in 1..29 (columns t0..t23) and a label: 0 when the tokens 2, 3 stand next to each
other in that order somewhere in the row, 1 when they stand as 3, 2, and 2 when they stand apart. Every
row holds both tokens 2 and 3 exactly once, so counting tokens tells the classes nowhere apart: a model must
look at their order and adjacency, which a one-dimensional convolution sees and a bag of words does not.
Deterministic (seed 47): rerunning gives the same file, byte for byte.
"""
import csv
import random
import sys

STEPS, VOCAB, ROWS = 24, 30, 3000


def row(rng, label):
    tokens = [rng.choice([t for t in range(1, VOCAB) if t not in (2, 3)]) for _ in range(STEPS)]
    if label == 2:
        a, b = sorted(rng.sample(range(STEPS), 2))
        while b - a == 1:
            a, b = sorted(rng.sample(range(STEPS), 2))
        first, second = (2, 3) if rng.random() < 0.5 else (3, 2)
        tokens[a], tokens[b] = first, second
    else:
        at = rng.randrange(STEPS - 1)
        tokens[at], tokens[at + 1] = (2, 3) if label == 0 else (3, 2)
    return tokens + [label]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "configs/data/bigrams.csv"
    rng = random.Random(47)
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([f"t{i}" for i in range(STEPS)] + ["label"])
        for i in range(ROWS):
            w.writerow(row(rng, i % 3))


if __name__ == "__main__":
    main()
