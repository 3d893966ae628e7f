# The two commands of the README:
#   make quickstart  runs the exactly-once copy on an embedded broker
#   make test        runs every test against real Apache Kafka (it starts it)
.PHONY: quickstart test unit build lint docs bench simulate

build:
	go build -buildvcs=auto -o bin/connect-eos ./cmd/connect-eos

quickstart:
	go run ./cmd/connect-eos dev \
	  --topic orders:3 --fill orders:10000 --topic orders_copy:3 --report orders_copy \
	  config/examples/quickstart.yaml

test:
	bash scripts/test.sh

# Unit and kfake tests only: no broker, seconds.
unit:
	go test -race -count=1 ./...

lint: build
	./bin/connect-eos lint config/examples/*.yaml resources/*.yaml

docs:
	go test ./internal/docgen -update

# Benchmarks on a real Apache Kafka it starts (~15 min): kafka_eos vs a plain
# idempotent output, raw franz-go and Kafka's ProducerPerformance /
# ConsumerPerformance; rewrites the table in docs/benchmarks.md and its plot.
# Flags: make bench BENCH_FLAGS='-runs 1 -duration 5s'
bench:
	go run ./integration/bench -out docs/benchmarks.md $(BENCH_FLAGS)

# The seeded fault-injection simulation (integration/sim, docs/testing.md):
#   make simulate                 the fixed seeds (those `make test` runs)
#   make simulate SEEDS=500       500 random seeds: a summary line each, then a total
#   make simulate SEED=123        replay one seed, narrated, its logs kept
# PARALLEL (runs at once, 2), RACE (-race; RACE= to leave it out), and the
# SIM_* variables of integration/sim/sim_test.go (SIM_KEEP, SIM_DIR, ...).
PARALLEL ?= 2
RACE ?= -race
simulate:
	SIM_SEEDS=$(SEEDS) SIM_SEED=$(SEED) SIM_PARALLEL=$(PARALLEL) \
	  go test $(RACE) -count=1 -timeout 0 -run '^TestSimulate$$' -v ./integration/sim
