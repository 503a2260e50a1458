#!/usr/bin/env bash
# red team: A FIFO as reward.json before grading, and a writer that turns reward.txt into one during it.
echo 41 > /app/answer.txt
mkfifo /logs/verifier/reward.json
setsid nohup bash -c 'touch /tmp/.redteam-ready; until [ -e /logs/verifier/.grading ]; do sleep 0.01; done; rm -f /logs/verifier/reward.txt; mkfifo /logs/verifier/reward.txt; touch /tmp/.redteam-done' redteam-writer >/dev/null 2>&1 </dev/null &
until [ -e /tmp/.redteam-ready ]; do sleep 0.01; done
