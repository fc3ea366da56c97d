#!/usr/bin/env bash
# Regenerates the example and test PKI (valid for 100 years): a CA, and certificates signed by
# it for localhost (the default), www.example.test, *.api.example.test, a renewed localhost
# certificate (for reload tests) and an RSA-2048 localhost certificate (for benchmarks).
# Keys are for examples and tests only; never use them for anything else.
set -euo pipefail
cd "$(dirname "$0")"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500 \
  -subj "/CN=capstan example CA" -keyout ca.key -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
issue() { # NAME SUBJECT_ALT_NAMES KEY_ARGS...
  local name=$1 san=$2
  shift 2
  openssl req -newkey "$@" -nodes -subj "/CN=${name}" -keyout "${name}.key" -out "${name}.csr"
  openssl x509 -req -in "${name}.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 36500 \
    -out "${name}.pem" -extfile <(printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' "$san")
  rm -f "${name}.csr"
}
ec=(ec -pkeyopt ec_paramgen_curve:prime256v1)
issue localhost 'DNS:localhost,IP:127.0.0.1' "${ec[@]}"
issue localhost-renewed 'DNS:localhost,IP:127.0.0.1' "${ec[@]}"
issue www.example.test 'DNS:www.example.test,DNS:example.test' "${ec[@]}"
issue api.example.test 'DNS:*.api.example.test' "${ec[@]}"
issue localhost-rsa 'DNS:localhost,IP:127.0.0.1' rsa:2048
# A second CA that signs nothing here: a switch trusting only it must refuse every node above.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500 \
  -subj "/CN=capstan other CA" -keyout other-ca.key -out other-ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
rm -f ca.key ca.srl other-ca.key
