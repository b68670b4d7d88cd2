#!/bin/bash
cd /app
ok=1
[ "$(python3 greet.py Ada)" = "Hello, Ada!" ] || { echo "plain greeting changed"; ok=0; }
[ "$(python3 greet.py --shout Ada)" = "HELLO, ADA!" ] || { echo "--shout does not shout"; ok=0; }
[ "$(python3 greet.py Grace --shout)" = "HELLO, GRACE!" ] || { echo "--shout after the name fails"; ok=0; }
echo $ok > /logs/verifier/reward.txt
