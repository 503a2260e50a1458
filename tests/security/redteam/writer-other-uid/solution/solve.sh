#!/usr/bin/env bash
# red team: A writer running as another uid inside, after a delay, writes reward.json.
echo 41 > /app/answer.txt
script='touch /tmp/.redteam-ready; sleep 2; until [ -e /logs/verifier/.grading ]; do sleep 0.01; done; printf "{\"reward\": 1}" > /logs/verifier/reward.json; touch /tmp/.redteam-done'
# as uid 1000 where the sandbox has other uids (where it maps one uid only: as root)
as=(setpriv --reuid=1000 --regid=1000 --clear-groups); "${as[@]}" true 2>/dev/null || as=()
setsid "${as[@]}" bash -c "$script" redteam-writer >/dev/null 2>&1 </dev/null &
until [ -e /tmp/.redteam-ready ]; do sleep 0.01; done
