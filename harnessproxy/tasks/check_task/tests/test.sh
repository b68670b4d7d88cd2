#!/bin/sh
if [ "$(cat /app/hello.txt 2>/dev/null)" = "hello from the oracle" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt is missing or wrong" >&2
  echo 0 > /logs/verifier/reward.txt
fi
