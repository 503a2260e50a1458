#!/usr/bin/env bash
# The image's tools (jq from apt, six from pip), data (COPY), WORKDIR and ENV.
ok=1
command -v jq >/dev/null || { echo "FAIL: jq is not installed"; ok=0; }
python3 -c "import six" || { echo "FAIL: six is not installed"; ok=0; }
[ "$(pwd)" = /srv/work ] || { echo "FAIL: working directory is $(pwd)"; ok=0; }
[ ! -e /srv/data/notes.txt ] || { echo "FAIL: .dockerignore was not honoured"; ok=0; }
[ "$(cat /srv/work/total.txt 2>/dev/null)" = "12 EUR" ] || { echo "FAIL: total.txt is wrong"; ok=0; }
echo $ok > /logs/verifier/reward.txt
