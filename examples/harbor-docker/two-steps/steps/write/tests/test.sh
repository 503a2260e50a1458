#!/usr/bin/env bash
if [ "$(cat /work/notes.txt 2>/dev/null)" = "first" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
