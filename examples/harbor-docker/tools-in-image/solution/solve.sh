#!/usr/bin/env bash
set -euo pipefail
total=$(jq '[.items[].price] | add' /srv/data/prices.json)
echo "$total $CURRENCY" > total.txt
