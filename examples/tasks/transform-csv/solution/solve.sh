#!/bin/bash
set -e
python3 - <<'PY'
import csv
from collections import defaultdict
totals = defaultdict(float)
with open("sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] += int(row["units"]) * float(row["price"])
with open("totals.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["region", "revenue"])
    for region, revenue in sorted(totals.items(), key=lambda kv: -kv[1]):
        w.writerow([region, f"{revenue:.2f}"])
PY
