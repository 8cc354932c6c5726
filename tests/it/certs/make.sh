#!/bin/sh
# Regenerates the test certificates (valid for 100 years) used by tests/it/inter_broker.rs:
#   ca.pem            the test CA (the brokers' truststore)
#   broker.pem        key + chain for CN=broker (SAN localhost, 127.0.0.1), server and client
#   other-host.pem    key + chain for CN=other (SAN other.example only), signed by the CA
#   untrusted-ca.pem  a CA that signed nothing here (a truststore that trusts no broker)
set -e
cd "$(dirname "$0")"
tmp=$(mktemp -d)
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {
  key "$tmp/$1.key"
  openssl req -x509 -new -key "$tmp/$1.key" -days 36500 -subj "/O=Strata Test/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.pem"
}
leaf() {
  key "$tmp/$1.key"
  openssl req -new -key "$tmp/$1.key" -subj "/O=Strata Test/CN=$2" -out "$tmp/$1.csr"
  printf "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n" "$3" > "$tmp/$1.ext"
  openssl x509 -req -in "$tmp/$1.csr" -CA ca.pem -CAkey "$tmp/ca.key" -CAcreateserial -CAserial "$tmp/ca.srl" \
    -days 36500 -extfile "$tmp/$1.ext" -out "$tmp/$1.crt" 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in "$tmp/$1.key" > "$1.pem"
  cat "$tmp/$1.crt" ca.pem >> "$1.pem"
}
ca ca "Strata Test CA"
leaf broker broker "DNS:localhost,IP:127.0.0.1"
leaf other-host other "DNS:other.example"
ca untrusted-ca "Untrusted CA"
rm -rf "$tmp"
