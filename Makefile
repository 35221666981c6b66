# outbox-relay developer entry points. The local stack (PostgreSQL 15 + Kafka 4.1.1)
# is managed by scripts/stack.sh; ports and paths are in docs/CONTRACT.md.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO          ?= go
STACK       := scripts/stack.sh
BIN         := bin/outbox-relay
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
INTEGRATION_TIMEOUT ?= 25m

.PHONY: all build up down status env stack-clean clean unit integration test demo lint fuzz-short

all: build

build:
	$(GO) build -o $(BIN) ./cmd/outbox-relay

up:
	$(STACK) up

down:
	$(STACK) down

status:
	$(STACK) status

env:
	@$(STACK) env

# Stops the stack and deletes .stack (PostgreSQL and Kafka data).
stack-clean:
	$(STACK) clean

clean:
	rm -rf bin

# Unit tests only: integration tests sit behind the `integration` build tag.
unit:
	$(GO) vet ./... && $(GO) test -race -count=1 ./...

integration: up
	@if [ ! -d integration ]; then echo "no ./integration directory: no integration tests to run"; exit 0; fi; \
	eval "$$($(STACK) env)"; \
	echo "OUTBOX_RELAY_DATABASE_URL=$$OUTBOX_RELAY_DATABASE_URL OUTBOX_RELAY_KAFKA_BROKERS=$$OUTBOX_RELAY_KAFKA_BROKERS"; \
	$(GO) test -tags integration -count=1 -v -timeout $(INTEGRATION_TIMEOUT) ./integration/...

# Sequential on purpose (also under make -j): unit first, then integration.
test:
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory fuzz-short
	$(MAKE) --no-print-directory integration

# A short, bounded run of every fuzz target (corpus in testdata/fuzz).
FUZZTIME ?= 10s
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -parallel 2 ./replication/

demo: up build
	bash scripts/demo.sh

lint:
	@files=$$(gofmt -l .); \
	if [ -n "$$files" ]; then echo "gofmt -l reports unformatted files:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags integration ./...
