#!/bin/bash
cd /app
python3 - <<'PY'
from leap import is_leap
cases = {2000: True, 1900: False, 2024: True, 2023: False}
bad = {y: is_leap(y) for y, want in cases.items() if is_leap(y) != want}
print("wrong for:", bad) if bad else print("all cases pass")
open("/logs/verifier/reward.txt", "w").write("0" if bad else "1")
PY
