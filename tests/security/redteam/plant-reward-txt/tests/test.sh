#!/usr/bin/env bash
# an honest test: 42 in /app/answer.txt passes
grep -qx 42 /app/answer.txt && echo 1 > /logs/verifier/reward.txt
