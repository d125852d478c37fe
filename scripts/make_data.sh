#!/bin/sh
# Regenerates configs/data/{iris,digits}.csv from the copies that Debian's python3-sklearn ships.
# Run once from the repository root; the output is committed, so neither the build nor the tests need sklearn.
set -eu

src=${SKLEARN_DATA:-/usr/lib/python3/dist-packages/sklearn/datasets/data}
out=configs/data

# iris.csv's first line is sklearn's own header ("150,4,setosa,..."); swap it for column names.
{
  echo "sepal_length,sepal_width,petal_length,petal_width,label"
  tail -n +2 "$src/iris.csv" | tr -d '\r'
} >"$out/iris.csv"

# digits.csv.gz has no header: 64 pixel counts (0..16) then the digit.
{
  seq 0 63 | sed 's/^/p/' | tr '\n' ','
  echo "label"
  gzip -dc "$src/digits.csv.gz" | tr -d '\r'
} >"$out/digits.csv"

wc -l "$out/iris.csv" "$out/digits.csv"
