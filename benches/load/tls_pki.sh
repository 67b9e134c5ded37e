#!/usr/bin/env bash
# A throwaway PKI for the TLS benchmarks: a CA and a server certificate for localhost /
# 127.0.0.1, both ECDSA P-256 (as tests/support/tls_certs.py makes them), written to DIR as
# ca.pem, server.pem and server.key. Brokers get server.pem + server.key, the generator
# `--tls-ca-file DIR/ca.pem`.
#
#   benches/load/tls_pki.sh /tmp/pki
set -euo pipefail
dir=${1:?usage: tls_pki.sh DIR}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj /CN=bench-ca -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
    -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
echo "$dir: ca.pem server.pem server.key"
