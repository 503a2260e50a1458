#!/usr/bin/env bash
# red team: The yardstick: an honest wrong answer, graded as a failure.
echo 41 > /app/answer.txt
