#!/usr/bin/env bash
# an honest test: 42 in /app/answer.txt passes
# the task trusts the score the agent's program computed
cat /app/score > /logs/verifier/reward.txt
