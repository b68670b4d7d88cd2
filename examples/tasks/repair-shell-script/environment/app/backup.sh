#!/bin/bash
src=$1
dest=$2
count=0
for f in $(ls $src/*.txt); do
  cp $f $dest
  count=$((count + 1))
done
echo "backed up $count files"
