#!/usr/bin/env bash
if [ "$(cat /app/answer.txt 2>/dev/null)" = "open sesame" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
