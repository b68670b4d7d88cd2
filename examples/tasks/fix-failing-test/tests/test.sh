#!/bin/bash
# The verifier's own copy of the test, plus hidden cases: the agent's edits to test_stats.py do not count.
cp /tests/test_stats_hidden.py /app/
cd /app
if python3 -m unittest test_stats_hidden -v; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
