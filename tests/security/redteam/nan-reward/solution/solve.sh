#!/usr/bin/env bash
# red team: Its verifier reports the agent's own score, and the agent's is NaN number.
echo nan > /app/score
