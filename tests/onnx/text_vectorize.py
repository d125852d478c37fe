#!/usr/bin/python3
"""A reference in Python for tensorctl's text vectorization (models/data/text_vectorizer.h), written from
Keras' TextVectorization documentation rather than from our C++, so each checks the other.

    text_vectorize.py ids SUMMARY.json INPUT.csv        the ids of INPUT.csv's text column, as CSV, with the
                                                        vocabulary a run recorded in its summary.json
    text_vectorize.py vocabulary SUMMARY.json INPUT.csv fits a vocabulary on every row of INPUT.csv with the
                                                        run's settings and compares it with the one the run
                                                        recorded (a run trained on every row); exits 1 when
                                                        they differ
    text_vectorize.py bench INPUT.csv COLUMN           rows per second standardizing, splitting and looking up
                                                        COLUMN's text (one thread), for bench/text_bench.sh
"""
import collections
import csv
import json
import sys
import time

PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
STRIP = str.maketrans("", "", PUNCTUATION)
LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def standardize(text, mode):
    if mode in ("lower", "lower_and_strip_punctuation"):
        text = text.translate(LOWER)
    if mode in ("strip_punctuation", "lower_and_strip_punctuation"):
        text = text.translate(STRIP)
    return text


def split(text, mode):
    # str.split() with no argument splits on runs of whitespace, dropping empty tokens (as tf.strings.split);
    # Python's whitespace also takes in \x1c-\x1f and Unicode spaces, which shipped corpora do not hold.
    return text.split() if mode == "whitespace" else list(text)


def vectorizer(options, vocabulary):
    index = {token: i for i, token in enumerate(vocabulary) if i >= 2}
    length = options["output_sequence_length"]

    def ids(text):
        out = [index.get(t, 1) for t in split(standardize(text, options["standardize"]), options["split"])[:length]]
        return out + [0] * (length - len(out))
    return ids


def fit(options, texts):
    counts = collections.Counter()
    for text in texts:
        counts.update(split(standardize(text, options["standardize"]), options["split"]))
    counts.pop("[UNK]", None)
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0].encode()), reverse=True)
    return ["", "[UNK]"] + [t for t, _ in ranked[:options["max_tokens"] - 2]]


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def text_ids(summary_path, input_path):
    """The ids of INPUT's text column under the run's recorded vocabulary, one list per row."""
    with open(summary_path, encoding="utf-8") as f:
        text = json.load(f)["preprocessing"]["text"]
    header, rows = read_rows(input_path)
    column = header.index(text["column"])
    ids = vectorizer(text, text["vocabulary"])
    return [ids(row[column]) for row in rows]


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "ids":
        w = csv.writer(sys.stdout, lineterminator="\n")
        for row in text_ids(sys.argv[2], sys.argv[3]):
            w.writerow(row)
    elif len(sys.argv) == 4 and sys.argv[1] == "vocabulary":
        with open(sys.argv[2], encoding="utf-8") as f:
            text = json.load(f)["preprocessing"]["text"]
        header, rows = read_rows(sys.argv[3])
        ours = fit(text, [row[header.index(text["column"])] for row in rows])
        recorded = text["vocabulary"]
        same = ours == recorded
        print(f"{len(recorded)} tokens recorded, {len(ours)} fitted here: {'the same' if same else 'they differ'}")
        if not same:
            first = next((i for i, (a, b) in enumerate(zip(ours, recorded)) if a != b), min(len(ours), len(recorded)))
            print(f"first difference at {first}: {ours[first:first + 3]} here, {recorded[first:first + 3]} recorded")
        sys.exit(0 if same else 1)
    elif len(sys.argv) == 4 and sys.argv[1] == "bench":
        header, rows = read_rows(sys.argv[2])
        texts = [row[header.index(sys.argv[3])] for row in rows]
        options = {"standardize": "lower_and_strip_punctuation", "split": "whitespace", "max_tokens": 20000,
                   "output_sequence_length": 64}
        ids = vectorizer(options, fit(options, texts))
        best = 0.0
        for _ in range(5):
            start = time.perf_counter()
            for t in texts:
                ids(t)
            best = max(best, len(texts) / (time.perf_counter() - start))
        print(f"python reference: {len(texts)} rows, {best:,.0f} rows/s")
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
