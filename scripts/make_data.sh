#!/bin/sh
# Regenerates configs/data/{iris,iris_species,digits,wine,diabetes}.csv from the copies that Debian's python3-sklearn ships.
# Run once from the repository root; the output is committed, so neither the build nor the tests need sklearn.
set -eu

src=${SKLEARN_DATA:-/usr/lib/python3/dist-packages/sklearn/datasets/data}
out=configs/data

# iris.csv's first line is sklearn's own header ("150,4,setosa,..."); swap it for column names.
{
  echo "sepal_length,sepal_width,petal_length,petal_width,label"
  tail -n +2 "$src/iris.csv" | tr -d '\r'
} >"$out/iris.csv"

# iris_species.csv: the same rows with the class written as the species' name (configs/iris_species.json).
awk -F, -v OFS=, 'NR == 1 { $5 = "species"; print; next }
  { split("setosa versicolor virginica", name, " "); $5 = name[$5 + 1]; print }' "$out/iris.csv" >"$out/iris_species.csv"

# digits.csv.gz has no header: 64 pixel counts (0..16) then the digit.
{
  seq 0 63 | sed 's/^/p/' | tr '\n' ','
  echo "label"
  gzip -dc "$src/digits.csv.gz" | tr -d '\r'
} >"$out/digits.csv"

# wine_data.csv: sklearn's header line ("178,13,class_0,...") swapped for the 13 measurement names.
{
  echo "alcohol,malic_acid,ash,alcalinity_of_ash,magnesium,total_phenols,flavanoids,nonflavanoid_phenols,proanthocyanins,color_intensity,hue,od280_od315,proline,label"
  tail -n +2 "$src/wine_data.csv" | tr -d '\r'
} >"$out/wine.csv"

# diabetes: ten space-separated raw features per row in one file, the disease progression in another.
{
  echo "age,sex,bmi,bp,s1,s2,s3,s4,s5,s6,target"
  gzip -dc "$src/diabetes_data_raw.csv.gz" | tr -d '\r' | tr ' ' ',' >/tmp/tctl_diabetes_x.$$
  gzip -dc "$src/diabetes_target.csv.gz" | tr -d '\r' | awk '{ printf "%g\n", $1 }' >/tmp/tctl_diabetes_y.$$
  paste -d, /tmp/tctl_diabetes_x.$$ /tmp/tctl_diabetes_y.$$
  rm -f /tmp/tctl_diabetes_x.$$ /tmp/tctl_diabetes_y.$$
} >"$out/diabetes.csv"

wc -l "$out/iris.csv" "$out/iris_species.csv" "$out/digits.csv" "$out/wine.csv" "$out/diabetes.csv"
