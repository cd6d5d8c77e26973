# txretry — developer commands. `make test` is what README.md and CI run.
GO ?= go
RACE ?= -race
# Nested modules: each has its own go.mod so that library users never get
# their dependencies (testcontainers, OpenTelemetry) in their module graph.
MODULES := $(patsubst %/go.mod,%,$(wildcard integration/go.mod examples/go.mod otelretry/go.mod))

PG_DSN ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/test

.PHONY: test unit integration modules lint demo bench env

## test: unit tests, then every nested module's tests (integration suite, examples, adapters), all with -race
test: unit modules

## unit: the library's own unit tests (no database needed)
unit:
	$(GO) test $(RACE) -count=1 ./...

## modules: the nested modules' tests (need TXRETRY_PG_DSN / TXRETRY_MYSQL_DSN, or Docker for testcontainers)
modules:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) test $(RACE) -count=1 ./...); done

## integration: only the integration module
integration:
	cd integration && $(GO) test $(RACE) -count=1 ./...

## lint: gofmt and go vet over every module
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done

## demo: concurrent SERIALIZABLE bank transfers on PostgreSQL and MySQL/MariaDB, with retries shown
demo:
	cd examples && $(GO) run ./bank

## env: print the DSN exports for the local servers of a development machine
env:
	@echo "export TXRETRY_PG_DSN='$(PG_DSN)'"
	@echo "export TXRETRY_MYSQL_DSN='$(MYSQL_DSN)'"
