#!/bin/bash
set -e
cat > backup.sh <<'SH'
#!/bin/bash
set -euo pipefail
src=$1
dest=$2
mkdir -p -- "$dest"
count=0
for f in "$src"/*.txt; do
  [ -e "$f" ] || continue
  cp -- "$f" "$dest/"
  count=$((count + 1))
done
echo "backed up $count files"
SH
chmod +x backup.sh
