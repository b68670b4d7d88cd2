#!/bin/bash
# Wrong on purpose (forgets the century rule), so this task is the failing row of the example run.
printf 'def is_leap(year):\n    return year %% 4 == 0\n' > leap.py
