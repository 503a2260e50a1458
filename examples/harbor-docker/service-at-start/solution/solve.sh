#!/usr/bin/env bash
set -euo pipefail
for _ in $(seq 50); do
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/secret.txt').read().decode(), end='')" > /app/answer.txt && exit 0
  sleep 0.2
done
exit 1
