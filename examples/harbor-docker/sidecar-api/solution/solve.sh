#!/usr/bin/env bash
set -euo pipefail
python3 -c "import json, urllib.request as u; print(json.load(u.urlopen('http://api:5000/answer.json'))['answer'])" > /app/answer.txt
