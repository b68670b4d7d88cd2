#!/bin/bash
set -e
python3 - <<'PY'
from pathlib import Path
p = Path("greet.py")
s = p.read_text()
s = s.replace('    parser.add_argument("name")\n',
              '    parser.add_argument("name")\n    parser.add_argument("--shout", action="store_true")\n')
s = s.replace('    print(message)\n', '    print(message.upper() if args.shout else message)\n')
p.write_text(s)
PY
