# The two commands of the README:
#   make quickstart  runs the exactly-once copy on an embedded broker
#   make test        runs every test against real Apache Kafka (it starts it)
.PHONY: quickstart test unit build lint docs bench

build:
	go build -o bin/connect-eos ./cmd/connect-eos

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
