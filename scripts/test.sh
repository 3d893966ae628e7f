#!/usr/bin/env bash
# The one test command (README, `make test`, .ci/run): installs what is
# missing, starts two real Apache Kafka brokers (transaction.version 0 and 2),
# runs every test with the race detector against them, and stops them again.
# Exits non-zero on any failure. Environment:
#   GO_TEST_FLAGS  extra flags for go test (e.g. -run Foo -v)
#   GO_TEST_PKGS   packages to test (default ./...)
#   GO_TEST_TIMEOUT  go test -timeout (default 60m: the chaos suite takes about 11 minutes on a quiet 2-core machine, its cluster variant, which starts its own 3-node cluster, about 7 more, and both together past 30 minutes on a machine loaded by other jobs; CI allows 90)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "test.sh: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "go is not installed: install Go 1.26 (https://go.dev/dl) and run again"
  exit 1
fi

names=()
cleanup() {
  for n in "${names[@]}"; do
    bash integration/kafka/down.sh --name "$n" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT INT TERM

start_broker() { # $1 = transaction version
  local name="test-tv$1" line
  bash integration/kafka/down.sh --name "$name" >/dev/null 2>&1 || true
  names+=("$name")
  line=$(bash integration/kafka/up.sh --tv "$1" --name "$name" | grep '^KAFKA_BROKERS=' | tail -n 1)
  if [ -z "$line" ]; then
    log "broker with transaction.version=$1 did not start"
    exit 1
  fi
  export "KAFKA_BROKERS_TV$1=${line#KAFKA_BROKERS=}"
  log "Apache Kafka with transaction.version=$1 at ${line#KAFKA_BROKERS=}"
  # The tv2 broker's secured listeners for integration/security_test.go and
  # the SASL tests of input/ (up.sh prints them again when asked for a running
  # broker). A failure here fails the script: the tests would otherwise see no
  # secured listener and (without KAFKATEST_REQUIRE) skip.
  if [ "$1" = 2 ]; then
    local sec v
    if ! sec=$(bash integration/kafka/up.sh --tv 2 --name "$name" | grep -E '^KAFKA_(SASL_|SSL_BROKERS=|CA_FILE=|CLIENT_)'); then
      log "the broker with transaction.version=2 printed no secured-listener variables (up.sh --tv 2 --name $name failed, or ran with --no-sasl-ssl)"
      exit 1
    fi
    while IFS= read -r kv; do export "$kv"; done <<<"$sec"
    for v in KAFKA_SASL_SSL_BROKERS KAFKA_SSL_BROKERS KAFKA_CA_FILE KAFKA_CLIENT_CERT_FILE KAFKA_CLIENT_KEY_FILE \
      KAFKA_SASL_ADMIN KAFKA_SASL_ALLOWED KAFKA_SASL_DENIED KAFKA_SASL_ACL_PREFIX; do
      if [ -z "${!v:-}" ]; then
        log "secured listener: up.sh printed no $v"
        exit 1
      fi
    done
    log "secured listeners: SASL_SSL at $KAFKA_SASL_SSL_BROKERS, mTLS at $KAFKA_SSL_BROKERS"
  fi
}

log "go vet"
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  log "gofmt would change: $unformatted"
  exit 1
fi

export KAFKATEST_REQUIRE=1 # a missing broker fails the real-Kafka tests instead of skipping them
start_broker 0
start_broker 2

# Build the binary once: the process-level tests (kill -9, exit codes) run it.
mkdir -p bin
go build -buildvcs=auto -o bin/connect-eos ./cmd/connect-eos
export CONNECT_EOS_BIN="$PWD/bin/connect-eos"

log "go test -race ${GO_TEST_PKGS:-./...}"
# shellcheck disable=SC2086
go test -race -count=1 -timeout "${GO_TEST_TIMEOUT:-60m}" ${GO_TEST_FLAGS:-} ${GO_TEST_PKGS:-./...}
