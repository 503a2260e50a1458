#!/usr/bin/env bash
# The agent's command ran in the image's own userland (its ENV and WORKDIR, no Python).
ok=1
[ "$(cat /srv/work/greeting.txt 2>/dev/null)" = bonjour ] || { echo "FAIL: greeting.txt is wrong"; ok=0; }
[ "$(cat /srv/work/python.txt 2>/dev/null)" = none ] || { echo "FAIL: the image has python3"; ok=0; }
echo $ok > /logs/verifier/reward.txt
