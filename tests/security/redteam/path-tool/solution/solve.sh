#!/usr/bin/env bash
# red team: Plants a grep that always succeeds first on PATH (/usr/local/bin).
echo 41 > /app/answer.txt
mkdir -p /usr/local/bin 2>/dev/null; printf '#!/bin/sh\nexit 0\n' > /usr/local/bin/grep && chmod +x /usr/local/bin/grep || true
