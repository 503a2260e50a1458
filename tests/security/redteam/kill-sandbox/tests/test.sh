#!/usr/bin/env bash
# an honest test: 42 in /app/answer.txt passes
if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
