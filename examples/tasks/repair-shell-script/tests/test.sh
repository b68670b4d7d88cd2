#!/bin/bash
work=$(mktemp -d)
mkdir -p "$work/in dir"
echo a > "$work/in dir/one file.txt"
echo b > "$work/in dir/two.txt"
echo c > "$work/in dir/skip.log"
out=$(bash /app/backup.sh "$work/in dir" "$work/out dir" 2>&1)
ok=1
[ "$out" = "backed up 2 files" ] || { echo "output was: $out"; ok=0; }
[ "$(cat "$work/out dir/one file.txt" 2>/dev/null)" = a ] || { echo "one file.txt not copied"; ok=0; }
[ -e "$work/out dir/skip.log" ] && { echo "copied a .log file"; ok=0; }
echo $ok > /logs/verifier/reward.txt
