#!/usr/bin/env bash
# red team: Makes the verifier hang (answer.txt a FIFO nobody writes) past its timeout.
rm -f /app/answer.txt; mkfifo /app/answer.txt
