#!/bin/bash
expected='region,revenue
south,35.50
north,27.49
east,23.50'
got="$(tr -d '\r' < /app/totals.csv 2>/dev/null)"
if [ "$got" = "$expected" ]; then echo 1 > /logs/verifier/reward.txt; else
  printf 'expected:\n%s\ngot:\n%s\n' "$expected" "$got"; echo 0 > /logs/verifier/reward.txt; fi
