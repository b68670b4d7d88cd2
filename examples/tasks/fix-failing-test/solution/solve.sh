#!/bin/bash
set -e
sed -i 's|sum(values) / (len(values) - 1)|sum(values) / len(values)|' stats.py
