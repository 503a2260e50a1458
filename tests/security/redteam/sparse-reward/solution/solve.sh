#!/usr/bin/env bash
# red team: A 2 GiB sparse reward.json before grading, and a writer that makes one during it.
echo 41 > /app/answer.txt
truncate -s 2G /logs/verifier/reward.json
setsid nohup bash -c 'touch /tmp/.redteam-ready; until [ -e /logs/verifier/.grading ]; do sleep 0.01; done; truncate -s 2G /logs/verifier/reward.json; touch /tmp/.redteam-done' redteam-writer >/dev/null 2>&1 </dev/null &
until [ -e /tmp/.redteam-ready ]; do sleep 0.01; done
