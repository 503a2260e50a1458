#!/bin/sh
# Start the service, then run what the container was given (Harbor's keep-alive).
cd /srv/www && python3 -m http.server 8080 --bind 127.0.0.1 >/tmp/server.log 2>&1 &
exec "$@"
